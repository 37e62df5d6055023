"""HTTP load benchmark: requests/s and p50/p99 latency vs concurrency against a real ``lnserve serve`` on
loopback, with two baselines taken in the same run:

- in-process: the engine called directly (same model, same intra-op threads, tokenisation included),
  ``c`` sentences per call: the best the engine does at concurrency ``c``, what perfect batching could
  reach. The HTTP column ``vs engine`` is HTTP req/s divided by that sentences/s. ``vs engine at its
  batches`` divides by the engine's sentences/s at the mean batch the server actually formed (its
  ``X-Batch-Size``): the cost of HTTP alone, with the batching policy taken out;
- batch-size-1 serving (``LNSERVE_MAX_BATCH_SIZE=1``): the same server without micro-batching;
- the bare framework: a minimal FastAPI app the benchmark writes and starts itself, on the same server stack
  (uvicorn + uvloop + httptools, no access log), validating the same body with the same pydantic model
  (``EncodeRequest``) and returning a fixed vector of the model's size in the same response shape. ``vs
  bare`` is lnserve's req/s over its req/s: what lnserve costs beyond the framework itself.

Cells are interleaved per concurrency (engine, then both servers) and repeated (``--rounds``), keeping the
best: on a shared machine speed drifts over a run. The idle line compares the HTTP p50 at one client with
the engine's p50 for one sentence. Each request carries one sentence (the common embedding call). The load
generator shares the machine with the server (its CPU share is printed), so on a small box the HTTP numbers
are pessimistic. Not a test: run it by hand.

    python benchmarks/http_load.py [--models DIR] [--seconds 3] [--concurrency 1 4 16 64]

``--variant KEY=VALUE...`` adds one more lnserve server with those settings (e.g.
``LNSERVE_INLINE_BATCH_MAX_MS=0``, every batch in the model's worker thread), measured in the same
interleaved rounds; a second table compares it with the default server and the bare app.

``--open-loop RATE...`` measures overload instead: requests are sent at a fixed rate whatever the server
does (a new connection whenever none is idle), each latency counted from the request's scheduled send time,
so a server that falls behind cannot hide it. A rate ``Nx`` is N times the saturation measured in the same
run (closed loop, 64 clients or max_inflight if fewer). The table gives, per rate, the served (200)
requests/s, the 429s by code, p50/p99 of the served and of the refused, with the idle latency (1 client) as
the baseline.

    python benchmarks/http_load.py --open-loop 2x [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lnserve.app.demo_model.data import ensure_demo_artifact  # noqa: E402
from lnserve.app.runtime.engine import Engine  # noqa: E402
from tests.e2e.server import start_server  # noqa: E402


def vocabulary(model: Path) -> list[str]:
    """Words the model knows (order-embedding vocab or skip-thoughts dictionary), for realistic requests."""
    for name, key in (("vocab.json", "worddict"), ("dictionary.json", "words")):
        if (model / name).is_file():
            return list(json.loads((model / name).read_text(encoding="utf-8"))[key])[:5000]
    raise SystemExit(f"{model}: no vocabulary found")


def sentences(words: list[str], n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(5, 15))) for _ in range(n)]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) * 1000.0


def in_process(model: Path, concurrency: int, seconds: float, threads: int) -> tuple[float, float, float]:
    """Sentences/s and per-call p50/p99 (ms) calling the engine with ``concurrency`` sentences per call."""
    engine = Engine.open(model, threads=threads)
    pool, lat, done = sentences(vocabulary(model), 4096, seed=1), [], 0
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        batch = pool[i : i + concurrency] or pool[:concurrency]
        i = (i + concurrency) % (len(pool) - concurrency)
        t = time.perf_counter()
        engine.encode(batch)
        lat.append(time.perf_counter() - t)
        done += len(batch)
    return done / seconds, pct(lat, 50), pct(lat, 99)


def cpu_model() -> str:
    path = Path("/proc/cpuinfo")
    lines = path.read_text().splitlines() if path.exists() else []
    return next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), "unknown")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def http_load(
    url: str, concurrency: int, seconds: float, words: list[str], stats: dict[str, float] | None = None
) -> tuple[float, float, float, int]:
    """Requests/s, p50/p99 (ms) and non-200 count with ``concurrency`` clients sending one sentence each.
    ``stats`` gets the mean ``X-Batch-Size`` (``batch``) and this load generator's CPU share (``client_cpu``,
    cores)."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    bodies = [json.dumps({"sentences": [s]}).encode() for s in sentences(words, 4096, seed=2)]
    requests = [
        b"POST /encode HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (host.encode(), len(body), body)
        for body in bodies
    ]
    lat: list[float] = []
    batches: list[int] = []
    errors = 0
    httpx.post(url + "/encode", json={"sentences": ["warm up"]}, timeout=60)
    end = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port)
        k = w
        while time.perf_counter() < end:
            t = time.perf_counter()
            status, headers, _ = await _exchange(reader, writer, requests[k % len(requests)])
            lat.append(time.perf_counter() - t)
            batches.append(int(headers.get(b"x-batch-size", 0)))
            errors += status != 200
            k += concurrency
        writer.close()

    t0, cpu0 = time.perf_counter(), _cpu_s()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    if stats is not None:
        stats["batch"] = float(np.mean(batches))
        stats["client_cpu"] = (_cpu_s() - cpu0) / elapsed
    return len(lat) / elapsed, pct(lat, 50), pct(lat, 99), errors


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request on a keep-alive HTTP/1.1 connection: (status, lower-cased headers, body). A minimal
    client keeps the load generator's own CPU cost (httpx costs milliseconds per request) from being what
    is measured."""
    writer.write(request)
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("closed by the server")
    headers: dict[bytes, bytes] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get(b"content-length", 0)))
    return int(status_line.split()[1]), headers, body


async def open_loop(
    url: str, rate: float, seconds: float, words: list[str], *, max_connections: int = 8192
) -> dict[str, Any]:
    """Send one-sentence requests at ``rate``/s for ``seconds``; latency from each scheduled send time."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    bodies = [json.dumps({"sentences": [s]}).encode() for s in sentences(words, 4096, seed=3)]
    requests = [
        b"POST /encode HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (host.encode(), len(body), body)
        for body in bodies
    ]
    loop = asyncio.get_running_loop()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    slots = asyncio.Semaphore(max_connections)
    served: list[float] = []
    refused: dict[str, list[float]] = {}
    failed = 0
    opened = 0
    t0 = loop.time() + 0.1
    end = t0 + seconds
    served_in_window = 0

    async def one(k: int, scheduled: float) -> None:
        nonlocal failed, opened, served_in_window
        async with slots:
            conn = idle.pop() if idle else None
            try:
                if conn is None:
                    conn = await asyncio.open_connection(host, port)
                    opened += 1
                status, headers, body = await _exchange(*conn, requests[k % len(requests)])
                close = headers.get(b"connection", b"").lower() == b"close"
            except (OSError, asyncio.IncompleteReadError):
                failed += 1
                if conn is not None:
                    conn[1].close()
                return
            done = loop.time()
            if status == 200:
                served.append(done - scheduled)
                served_in_window += done <= end
            else:
                code = json.loads(body)["error"]["code"] if body.startswith(b"{") else str(status)
                refused.setdefault(f"{status} {code}", []).append(done - scheduled)
            if close:
                conn[1].close()
            else:
                idle.append(conn)

    tasks = []
    for k in range(int(rate * seconds)):
        scheduled = t0 + k / rate
        if (delay := scheduled - loop.time()) > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(k, scheduled)))
    _, pending = await asyncio.wait(tasks, timeout=60)
    for t in pending:
        t.cancel()
    for _, writer in idle:
        writer.close()
    out: dict[str, Any] = {
        "sent": len(tasks),
        "served_rps": served_in_window / seconds,
        "served": len(served),
        "p50": pct(served, 50) if served else float("nan"),
        "p99": pct(served, 99) if served else float("nan"),
        "failed": failed,
        "unfinished": len(pending),
        "connections": opened,
    }
    rejected = [x for xs in refused.values() for x in xs]
    out["rejected"] = len(rejected)
    out["rej_p50"] = pct(rejected, 50) if rejected else float("nan")
    out["rej_p99"] = pct(rejected, 99) if rejected else float("nan")
    out["codes"] = ", ".join(f"{code}: {len(xs)}" for code, xs in sorted(refused.items())) or "-"
    return out


def run_open_loop(args: argparse.Namespace) -> None:
    """Idle latency and saturation (closed loop), then each open-loop rate, on one server."""
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        model = args.models or (
            published_size_model(tmp / "model") if args.published_size else ensure_demo_artifact()
        )
        env = {"LNSERVE_THREADS": str(args.threads), "LNSERVE_ACCESS_LOG": "false"}
        srv = start_server(tmp, "--models", str(model), env=env)
        try:
            words = vocabulary(model)
            limit = httpx.get(srv.url + "/info", timeout=60).json()["limits"].get("max_inflight", "none")
            clients = min(64, limit) if isinstance(limit, int) else 64  # all admitted: no 429 is counted
            idle = asyncio.run(http_load(srv.url, 1, args.seconds, words))
            sat = asyncio.run(http_load(srv.url, clients, args.seconds, words))
            rows = []
            for given in args.open_loop:
                rate = float(given[:-1]) * sat[0] if given.endswith("x") else float(given)
                rows.append((given, rate, asyncio.run(open_loop(srv.url, rate, args.seconds, words))))
        finally:
            srv.stop()
    print(
        f"model: {model.name}   cores: {os.cpu_count()}   {args.seconds:.0f} s per cell, 1 sentence/request, "
        f"max_inflight {limit}\n"
    )
    print(f"idle (1 client, closed loop): p50 {idle[1]:.1f} ms, p99 {idle[2]:.1f} ms, {idle[0]:,.0f} req/s")
    sat_ms = f"p50 {sat[1]:.1f} ms, p99 {sat[2]:.1f} ms"
    print(f"saturation ({clients} clients, closed loop): {sat[0]:,.0f} req/s, {sat_ms}\n")
    print(
        "| offered | req/s sent | served req/s | served p50 ms | served p99 ms | p99 / idle p50 "
        "| 429s (by code) | 429 p50 ms | 429 p99 ms | failed / unfinished | connections |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for given, rate, r in rows:
        print(
            f"| {given} | {rate:,.0f} | {r['served_rps']:,.0f} | {r['p50']:,.1f} | {r['p99']:,.1f} "
            f"| {r['p99'] / idle[1]:,.1f} | {r['rejected']:,.0f} ({r['codes']}) | {r['rej_p50']:,.1f} "
            f"| {r['rej_p99']:,.1f} | {r['failed']:.0f} / {r['unfinished']:.0f} | {r['connections']:.0f} |"
        )


def published_size_model(out: Path, *, n_in: int = 300, d: int = 1024, n_words: int = 5000) -> Path:
    """A random-weight LN-GRU order-embedding artifact at the published dims (300 -> 1024), so the model
    costs what a real one does; the demo model is so small that HTTP alone dominates."""
    from benchmarks.encode_throughput import lngru_weights
    from lnserve.converters.order_embedding import ConvertedOrderEmbedding, write_order_embedding

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(n_words - 2)]
    cell = lngru_weights(n_in, d)
    tensors = {f"sentence.rnn.cell.{k}": v for k, v in cell.items()}
    tensors |= {
        "sentence.embedding.weight": rng.normal(0, 0.1, (n_words, n_in)),
        "image.proj.weight": rng.normal(0, 0.02, (d, 4096)),
        "image.proj.bias": np.zeros(d),
    }
    options = {
        "encoder": "lngru",
        "dim": d,
        "dim_word": n_in,
        "dim_image": 4096,
        "n_words": n_words,
        "method": "order",
        "abs": True,
        "margin": 0.05,
    }
    model = ConvertedOrderEmbedding(
        "lngru",
        options,
        {w: i + 2 for i, w in enumerate(words)},
        {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()},
        [],
        {},
    )
    write_order_embedding(model, out, name="lngru-300x1024-random")
    return out


BARE_APP = """
from fastapi import FastAPI

from lnserve.app.http.schemas.encode import EncodeRequest

app = FastAPI()
VECTOR = [0.125] * {dim}


@app.post("/encode")
async def encode(req: EncodeRequest) -> dict:
    n = len(req.sentences)
    return {{"model": "bare", "dim": {dim}, "encoding": "float", "vectors": [VECTOR] * n,
            "token_counts": [8] * n, "unk_counts": [0] * n}}


@app.get("/ready")
async def ready() -> dict:
    return {{"status": "ready"}}
"""


class BareServer:
    """The bare framework baseline: ``BARE_APP`` under uvicorn with uvloop and httptools, on loopback."""

    def __init__(self, tmp: Path, dim: int) -> None:
        import subprocess

        from tests.e2e.server import free_port

        (tmp / "bare_app.py").write_text(BARE_APP.format(dim=dim), encoding="utf-8")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(tmp / "bare.log", "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bare_app:app", "--app-dir", str(tmp), "--port", str(port),
             "--host", "127.0.0.1", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
             "--log-level", "warning"],
            stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the bare app did not start: " + (tmp / "bare.log").read_text())

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(30)
        self._log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=None, help="Artifact directory (default: the demo model).")
    ap.add_argument(
        "--published-size", action="store_true", help="Use a random LN-GRU artifact at 300 -> 1024 instead."
    )
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--threads", type=int, default=1, help="Intra-op threads for server and in-process.")
    ap.add_argument("--rounds", type=int, default=2, help="Interleaved repeats per cell; the best is kept.")
    ap.add_argument(
        "--variant",
        nargs="+",
        metavar="KEY=VALUE",
        default=[],
        help="One more lnserve server with these LNSERVE_* settings, measured beside the default one.",
    )
    ap.add_argument(
        "--open-loop",
        nargs="+",
        metavar="RATE",
        help="Open-loop overload instead: requests/s, or Nx = N times the measured saturation (e.g. 2x).",
    )
    args = ap.parse_args()
    if args.open_loop:
        run_open_loop(args)
        return

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        model = args.models or (
            published_size_model(tmp / "model") if args.published_size else ensure_demo_artifact()
        )
        env = {
            "LNSERVE_THREADS": str(args.threads),
            "LNSERVE_ACCESS_LOG": "false",
            "LNSERVE_MAX_QUEUE": "100000",
            "LNSERVE_MAX_INFLIGHT": "100000",  # throughput, not admission control, is measured here
        }
        labels = {"micro-batching": {}, "batch size 1": {"LNSERVE_MAX_BATCH_SIZE": "1"}}
        variant = dict(kv.split("=", 1) for kv in args.variant)
        if variant:
            labels["variant"] = variant
        servers: dict[str, Any] = {
            label: start_server(tmp, "--models", str(model), env={**env, **extra})
            for label, extra in labels.items()
        }
        dim = int(
            httpx.post(servers["micro-batching"].url + "/encode", json={"sentences": ["a"]}).json()["dim"]
        )
        servers["bare framework"] = BareServer(tmp, dim)
        base: dict[int, tuple[float, float, float]] = {}
        best: dict[tuple[str, int], tuple[float, float, float, int]] = {}
        stats: dict[int, dict[str, float]] = {c: {} for c in args.concurrency}
        try:
            # interleaved per concurrency and repeated, best of the rounds: on a shared VM the speed drifts
            # over a run, and an engine measured minutes apart from its HTTP cell would skew the ratio
            for _ in range(args.rounds):
                for c in sorted({1, *args.concurrency}):
                    base[c] = max(
                        base.get(c, (0.0, 0.0, 0.0)), in_process(model, c, args.seconds, args.threads)
                    )
                    if c not in args.concurrency:
                        continue
                    for label, srv in servers.items():
                        st: dict[str, float] = {}
                        r = asyncio.run(http_load(srv.url, c, args.seconds, vocabulary(model), st))
                        if r[0] > best.get((label, c), (0.0,))[0]:
                            best[label, c] = r
                            if label == "micro-batching":
                                stats[c] = st
        finally:
            for srv in servers.values():
                srv.stop()
        # the engine at the batch sizes the server formed (rounded mean), where not measured already
        formed = {c: max(1, round(stats[c]["batch"])) for c in args.concurrency}
        for b in sorted(set(formed.values()) - set(base)):
            base[b] = max(in_process(model, b, args.seconds, args.threads) for _ in range(args.rounds))
        rows = [(label, c, *r) for (label, c), r in best.items()]

    print(
        f"cpu: {cpu_model()}\nmodel: {model.name}   cores: {os.cpu_count()}   {args.seconds:.0f} s per cell, "
        f"best of "
        f"{args.rounds} interleaved rounds, 1 sentence/request\n"
    )
    print(
        "| concurrency | in-process engine sent/s (p50 ms/call) | micro-batching req/s | p50 ms | p99 ms "
        "| vs engine | mean batch | vs engine at its batches | client CPU | batch-size-1 req/s | p50 ms "
        "| p99 ms | micro-batching gain | bare framework req/s | p50 ms | vs bare |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by = {(label, c): (rps, p50, p99, err) for label, c, rps, p50, p99, err in rows}
    for c in args.concurrency:
        e_rps, e_p50, _ = base[c]
        m, one, bare = by[("micro-batching", c)], by[("batch size 1", c)], by[("bare framework", c)]
        print(
            f"| {c} | {e_rps:,.0f} ({e_p50:.2f}) | {m[0]:,.0f} | {m[1]:.1f} | {m[2]:.1f} "
            f"| {m[0] / e_rps:.2f} | {stats[c]['batch']:.1f} | {m[0] / base[formed[c]][0]:.2f} "
            f"| {stats[c]['client_cpu']:.2f} "
            f"| {one[0]:,.0f} | {one[1]:.1f} | {one[2]:.1f} | {m[0] / one[0]:.2f}x "
            f"| {bare[0]:,.0f} | {bare[1]:.1f} | {m[0] / bare[0]:.2f} |"
        )
    if variant:
        print(f"\nvariant: {' '.join(args.variant)}, same rounds\n")
        cols = ["concurrency", "default req/s", "p50 ms", "vs bare", "variant req/s", "p50 ms", "vs bare"]
        print("| " + " | ".join([*cols, "default / variant"]) + " |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in args.concurrency:
            m, v, bare = by[("micro-batching", c)], by[("variant", c)], by[("bare framework", c)]
            print(
                f"| {c} | {m[0]:,.0f} | {m[1]:.2f} | {m[0] / bare[0]:.2f} | {v[0]:,.0f} | {v[1]:.2f} "
                f"| {v[0] / bare[0]:.2f} | {m[0] / v[0]:.2f}x |"
            )
    if 1 in args.concurrency:
        idle, engine_p50 = by[("micro-batching", 1)][1], base[1][1]
        print(
            f"\nidle (1 client): HTTP p50 {idle:.2f} ms, engine p50 {engine_p50:.2f} ms per sentence: "
            f"+{idle - engine_p50:.2f} ms (issue 24 target <= +1 ms)"
        )
    errs = sum(r[-1] for r in rows)
    if errs:
        print(f"\nnon-200 responses: {errs}")


if __name__ == "__main__":
    main()
