"""Scale-out benchmark: ``lnserve serve --ray`` with 1, 2 and 4 replicas against the single-process server,
all in one run, on loopback.

Two numbers per engine:

- throughput: requests/s at ``--concurrency`` clients (one sentence per request, as ``http_load.py``);
  ``vs single`` divides by the single-process server's, and ``per-replica efficiency`` is
  req/s / (replicas x the 1-replica Ray req/s): 1.0 would be linear scaling;
- the cost of the Ray hop: p50 latency at concurrency 1 minus the single process's p50 (the proxy actor and
  one more process boundary per request).

Every replica runs with ``LNSERVE_THREADS`` intra-op threads (default 1) and asks Ray for one CPU; a local
Ray instance is started per configuration. On a machine with fewer cores than replicas + proxy + load
generator the replicas share cores, so throughput cannot scale: read per-replica efficiency and the hop
overhead. Not a test: run it by hand.

    python benchmarks/scale_out.py [--seconds 5] [--concurrency 32] [--replicas 1 2 4] [--published-size]
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

from benchmarks.http_load import http_load, published_size_model, vocabulary  # noqa: E402
from lnserve.app.training.demo import ensure_demo_artifact  # noqa: E402
from tests.e2e.server import start_server  # noqa: E402


def measure(tmp: Path, args: argparse.Namespace, model: Path, extra: tuple[str, ...]) -> tuple[float, ...]:
    """(req/s at --concurrency, p50 ms, p99 ms, p50 ms at concurrency 1, non-200 count) for one server."""
    env = {
        "LNSERVE_THREADS": str(args.threads),
        "LNSERVE_ACCESS_LOG": "false",
        "LNSERVE_MAX_QUEUE": "100000",
    }
    srv = start_server(tmp, "--models", str(model), *extra, env=env, timeout=600)
    words = vocabulary(model)
    try:
        asyncio.run(http_load(srv.url, args.concurrency, 1.0, words))  # warm every replica's connection path
        rps, p50, p99, errors = asyncio.run(http_load(srv.url, args.concurrency, args.seconds, words))
        _, one_p50, _, errors_one = asyncio.run(http_load(srv.url, 1, args.seconds, words))
    finally:
        srv.stop(timeout=120)
    return rps, p50, p99, one_p50, errors + errors_one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=None, help="Artifact directory (default: the demo model).")
    ap.add_argument("--published-size", action="store_true", help="A random LN-GRU at 300 -> 1024 instead.")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--threads", type=int, default=1, help="Intra-op threads per server / replica.")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        model = args.models or (
            published_size_model(tmp / "model") if args.published_size else ensure_demo_artifact()
        )
        single = measure(tmp, args, model, ())
        ray = {n: measure(tmp, args, model, ("--ray", "--replicas", str(n))) for n in args.replicas}

    print(
        f"model: {model.name}   cores: {os.cpu_count()}   {args.seconds:.0f} s per cell, 1 sentence/request, "
        f"{args.threads} thread(s) per replica\n"
    )
    print(
        f"| engine | replicas | req/s @{args.concurrency} | p50 ms | p99 ms | vs single "
        "| per-replica efficiency | p50 ms @1 | Ray hop ms @1 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rps1, p50, p99, one, _ = single
    print(f"| single process | 1 | {rps1:,.0f} | {p50:.1f} | {p99:.1f} | 1.00 | - | {one:.2f} | - |")
    base = ray[min(ray)][0] / min(ray)
    for n, (rps, p50, p99, one_ray, _) in sorted(ray.items()):
        print(
            f"| ray | {n} | {rps:,.0f} | {p50:.1f} | {p99:.1f} | {rps / rps1:.2f} | {rps / (n * base):.2f} "
            f"| {one_ray:.2f} | {one_ray - one:+.2f} |"
        )
    errors = single[-1] + sum(r[-1] for r in ray.values())
    if errors:
        print(f"\nnon-200 responses: {errors}")


if __name__ == "__main__":
    main()
