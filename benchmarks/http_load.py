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

from lnserve.app.runtime.engine import Engine  # noqa: E402
from lnserve.app.training.demo import ensure_demo_artifact  # noqa: E402
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


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    """One keep-alive HTTP/1.1 POST on a raw connection; returns the status. A minimal client keeps the load
    generator's own CPU cost (httpx costs milliseconds per request) from being what is measured."""
    writer.write(request)
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def http_load(
    url: str, concurrency: int, seconds: float, words: list[str]
) -> tuple[float, float, float, int]:
    """Requests/s, p50/p99 (ms) and non-200 count with ``concurrency`` clients sending one sentence each."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    bodies = [json.dumps({"sentences": [s]}).encode() for s in sentences(words, 4096, seed=2)]
    requests = [
        b"POST /encode HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (host.encode(), len(body), body)
        for body in bodies
    ]
    lat: list[float] = []
    errors = 0
    httpx.post(url + "/encode", json={"sentences": ["warm up"]}, timeout=60)
    end = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port)
        k = w
        while time.perf_counter() < end:
            t = time.perf_counter()
            status = await _post(reader, writer, requests[k % len(requests)])
            lat.append(time.perf_counter() - t)
            errors += status != 200
            k += concurrency
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return len(lat) / elapsed, pct(lat, 50), pct(lat, 99), errors


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=None, help="Artifact directory (default: the demo model).")
    ap.add_argument(
        "--published-size", action="store_true", help="Use a random LN-GRU artifact at 300 -> 1024 instead."
    )
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--threads", type=int, default=1, help="Intra-op threads for server and in-process.")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        model = args.models or (
            published_size_model(tmp / "model") if args.published_size else ensure_demo_artifact()
        )
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
