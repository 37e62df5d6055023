"""Scale-out benchmark: ``lnserve serve --ray`` with 1, 2 and 4 replicas against the single-process server,
all in one run, on loopback.

Two numbers per engine:

- throughput: requests/s at ``--concurrency`` clients (one sentence per request, as ``http_load.py``);
  ``vs single`` divides by the single-process server's, and ``per-replica efficiency`` is
  req/s / (replicas x the 1-replica Ray req/s): 1.0 would be linear scaling;
- the cost of the Ray hop: p50 latency at concurrency 1 minus the single process's p50 (the proxy actor and
  one more process boundary per request, or what is left of it with direct ingress);
- where the CPU goes: CPU ms per request (user + system, from /proc) of each process under the server during
  the ``--concurrency`` run, by role (driver, Serve proxy, encoding replicas, gallery shards, controller,
  raylet / GCS / other Ray daemons). Linux only.

``--ingress proxy direct`` measures each Ray configuration behind Serve's HTTP proxy (rows ``ray``) and
with the replicas serving the port themselves (rows ``ray direct``; ``lnserve serve --ray --ingress
direct``). ``--variant NAME:VAR=VALUE,...`` adds a Ray row run with those environment variables (Ray's
levers, e.g. ``tput:RAY_SERVE_THROUGHPUT_OPTIMIZED=1,RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=1``),
so that old and new ratios come from the same run.

Every replica runs with ``LNSERVE_THREADS`` intra-op threads (default 1) and asks Ray for one CPU; a local
Ray instance is started per configuration. On a machine with fewer cores than replicas + proxy + load
generator the replicas share cores, so throughput cannot scale: read per-replica efficiency and the hop
overhead. Not a test: run it by hand.

    python benchmarks/scale_out.py [--seconds 5] [--concurrency 32] [--replicas 1 2 4] [--published-size]
                                   [--ingress proxy direct] [--variant NAME:VAR=VALUE,...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.http_load import cpu_model, http_load, published_size_model, vocabulary  # noqa: E402
from lnserve.app.demo_model.data import ensure_demo_artifact  # noqa: E402
from tests.e2e.server import start_server  # noqa: E402

ROLES = (  # (role, what its command line contains), first match wins
    ("proxy", "ProxyActor"),
    ("replica", "ServeReplica:lnserve:"),
    ("shards", "ServeReplica:lnserve-galleries"),
    ("controller", "ServeController"),
    ("raylet", "raylet"),
    ("gcs", "gcs_server"),
)
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command line, CPU seconds so far), for every readable process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(entry.name)] = (int(stat[1]), cmd, (int(stat[11]) + int(stat[12])) * TICK_S)
    return out


def cpu_by_role(root: int) -> dict[str, float]:
    """CPU seconds so far of ``root`` (the driver) and every process below it, summed by role."""
    procs = _processes()
    below, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, _) in procs.items():
            if ppid == parent and pid not in below:
                below.add(pid)
                frontier.append(pid)
    out: dict[str, float] = {}
    for pid in below:
        if pid not in procs:
            continue
        _, cmd, cpu = procs[pid]
        role = "driver" if pid == root else next((r for r, key in ROLES if key in cmd), "other")
        out[role] = out.get(role, 0.0) + cpu
    return out


def measure(
    tmp: Path, args: argparse.Namespace, model: Path, extra: tuple[str, ...], env_extra: dict[str, str]
) -> tuple[tuple[float, ...], dict[str, float]]:
    """(req/s at --concurrency, p50 ms, p99 ms, p50 ms at concurrency 1, non-200 count) for one server, and
    CPU ms per request by role during the --concurrency run."""
    env = {
        "LNSERVE_THREADS": str(args.threads),
        "LNSERVE_ACCESS_LOG": "false",
        "LNSERVE_MAX_QUEUE": "100000",
        # throughput, not admission control: behind Serve's proxy every client is the proxy, whose bodies
        # arrive slowly enough to trip the per-client body-read bound (429 + close) at 32 clients
        "LNSERVE_MAX_INFLIGHT": "100000",
        "LNSERVE_MAX_BODY_READS_PER_CLIENT": "100000",
        **env_extra,
    }
    srv = start_server(tmp, "--models", str(model), *extra, env=env, timeout=600)
    words = vocabulary(model)
    try:
        asyncio.run(http_load(srv.url, args.concurrency, 1.0, words))  # warm every replica's connection path
        before = cpu_by_role(srv.proc.pid)
        rps, p50, p99, errors = asyncio.run(http_load(srv.url, args.concurrency, args.seconds, words))
        after = cpu_by_role(srv.proc.pid)
        _, one_p50, _, errors_one = asyncio.run(http_load(srv.url, 1, args.seconds, words))
    finally:
        srv.stop(timeout=120)
    n = max(rps * args.seconds, 1.0)
    cpu = {role: 1000.0 * (after[role] - before.get(role, 0.0)) / n for role in after}
    return (rps, p50, p99, one_p50, errors + errors_one), cpu


def _variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, assignments = text.partition(":")
    return name, dict(a.split("=", 1) for a in assignments.split(",") if a)


def _row_name(name: str, ingress: str) -> str:
    return name if ingress == "proxy" else f"{name} {ingress}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=None, help="Artifact directory (default: the demo model).")
    ap.add_argument("--published-size", action="store_true", help="A random LN-GRU at 300 -> 1024 instead.")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--threads", type=int, default=1, help="Intra-op threads per server / replica.")
    ap.add_argument(
        "--variant", type=_variant, action="append", default=[],
        help="NAME:VAR=VALUE,... a Ray row (each --replicas count) with these variables set.",
    )  # fmt: skip
    ap.add_argument(
        "--ingress", nargs="+", choices=("proxy", "direct"), default=["proxy"],
        help="Ray rows behind Serve's proxy ('ray') and/or with direct ingress ('ray direct').",
    )  # fmt: skip
    args = ap.parse_args()

    rows: dict[tuple[str, int], tuple[float, ...]] = {}
    cpu: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        model = args.models or (
            published_size_model(tmp / "model") if args.published_size else ensure_demo_artifact()
        )
        rows["single process", 1], cpu["single process", 1] = measure(tmp, args, model, (), {})
        configs = [(_row_name(name, ingress), ingress, env) for name, env in [("ray", {}), *args.variant]
                   for ingress in args.ingress]  # fmt: skip
        for name, ingress, env in configs:
            for n in args.replicas:
                flags = ("--ray", "--replicas", str(n), "--ingress", ingress)
                rows[name, n], cpu[name, n] = measure(tmp, args, model, flags, env)

    print(
        f"model: {model.name}   CPU: {cpu_model()}   cores: {os.cpu_count()}\n"
        f"{args.seconds:.0f} s per cell, 1 sentence/request, {args.threads} thread(s) per replica\n"
    )
    for name, env in args.variant:
        print(f"{name}: {' '.join(f'{k}={v}' for k, v in env.items())}")
    print(
        f"\n| engine | replicas | req/s @{args.concurrency} | p50 ms | p99 ms | vs single "
        "| per-replica efficiency | p50 ms @1 | Ray hop ms @1 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rps1, _, _, one, _ = rows["single process", 1]
    for (name, n), (rps, p50, p99, one_n, _) in rows.items():
        if name == "single process":
            print(f"| single process | 1 | {rps1:,.0f} | {p50:.1f} | {p99:.1f} | 1.00 | - | {one:.2f} | - |")
            continue
        base = rows[name, min(args.replicas)][0] / min(args.replicas)
        print(
            f"| {name} | {n} | {rps:,.0f} | {p50:.1f} | {p99:.1f} | {rps / rps1:.2f} "
            f"| {rps / (n * base):.2f} | {one_n:.2f} | {one_n - one:+.2f} |"
        )
    roles = ["driver", *(r for r, _ in ROLES), "other"]
    print(f"\nCPU ms per request at {args.concurrency} clients, by process (user + system):\n")
    print(f"| engine | replicas | {' | '.join(roles)} | total |")
    print(f"|---|---:|{'---:|' * (len(roles) + 1)}")
    for (name, n), by_role in cpu.items():
        cells = " | ".join(f"{by_role.get(r, 0.0):.2f}" for r in roles)
        print(f"| {name} | {n} | {cells} | {sum(by_role.values()):.2f} |")
    errors = sum(r[-1] for r in rows.values())
    if errors:
        print(f"\nnon-200 responses: {errors}")


if __name__ == "__main__":
    main()
