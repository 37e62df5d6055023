"""HTTP load benchmark: requests/s and p50/p99 latency vs concurrency against a real ``lnserve serve`` on
loopback, with two baselines taken in the same run:

- in-process: the engine called directly, ``c`` sentences per call (what perfect batching could reach at
  concurrency ``c``); the HTTP column ``vs engine`` is HTTP req/s divided by that sentences/s;
- batch-size-1 serving (``LNSERVE_MAX_BATCH_SIZE=1``): the same server without micro-batching.

Each request carries one sentence (the common embedding call). The load generator shares the machine
with the server, so on a small box both numbers are pessimistic. Not a test: run it by hand.

    python benchmarks/http_load.py [--models DIR] [--seconds 3] [--concurrency 1 4 16 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.runtime.engine import Engine  # noqa: E402
from app.training.demo import ensure_demo_artifact  # noqa: E402
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


async def http_load(
    url: str, concurrency: int, seconds: float, words: list[str]
) -> tuple[float, float, float, int]:
    """Requests/s, p50/p99 (ms) and non-200 count with ``concurrency`` clients sending one sentence each."""
    pool = sentences(words, 4096, seed=2)
    lat: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        end = time.perf_counter() + seconds

        async def worker(w: int) -> None:
            nonlocal errors
            k = w
            while time.perf_counter() < end:
                t = time.perf_counter()
                r = await client.post("/encode", json={"sentences": [pool[k % len(pool)]]})
                lat.append(time.perf_counter() - t)
                errors += r.status_code != 200
                k += concurrency

        await client.post("/encode", json={"sentences": ["warm up"]})
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return len(lat) / elapsed, pct(lat, 50), pct(lat, 99), errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=None, help="Artifact directory (default: the demo model).")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--threads", type=int, default=1, help="Intra-op threads for server and in-process.")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        model = args.models or ensure_demo_artifact()
        env = {
            "LNSERVE_THREADS": str(args.threads),
            "LNSERVE_ACCESS_LOG": "false",
            "LNSERVE_MAX_QUEUE": "100000",
        }
        base = {c: in_process(model, c, args.seconds, args.threads) for c in args.concurrency}
        rows = []
        for label, extra in (("micro-batching", {}), ("batch size 1", {"LNSERVE_MAX_BATCH_SIZE": "1"})):
            srv = start_server(tmp, "--models", str(model), env={**env, **extra})
            try:
                for c in args.concurrency:
                    rows.append(
                        (label, c, *asyncio.run(http_load(srv.url, c, args.seconds, vocabulary(model))))
                    )
            finally:
                srv.stop()

    print(
        f"model: {model.name}   cores: {os.cpu_count()}   {args.seconds:.0f} s per cell, 1 sentence/request\n"
    )
    print(
        "| concurrency | in-process engine sent/s (p50 ms/call) | micro-batching req/s | p50 ms | p99 ms "
        "| vs engine | batch-size-1 req/s | p50 ms | p99 ms | micro-batching gain |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by = {(label, c): (rps, p50, p99, err) for label, c, rps, p50, p99, err in rows}
    for c in args.concurrency:
        e_rps, e_p50, _ = base[c]
        m, one = by[("micro-batching", c)], by[("batch size 1", c)]
        print(
            f"| {c} | {e_rps:,.0f} ({e_p50:.2f}) | {m[0]:,.0f} | {m[1]:.1f} | {m[2]:.1f} "
            f"| {m[0] / e_rps:.2f} "
            f"| {one[0]:,.0f} | {one[1]:.1f} | {one[2]:.1f} | {m[0] / one[0]:.2f}x |"
        )
    errs = sum(r[-1] for r in rows)
    if errs:
        print(f"\nnon-200 responses: {errs}")


if __name__ == "__main__":
    main()
