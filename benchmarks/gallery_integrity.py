"""What a gallery's integrity checks cost, against same-run baselines.

* append: ``add_items`` in batches (checksum per append, file checks, one SQLite commit) vs writing and
  fsyncing the same bytes to a plain file;
* verify: a fresh process's full verification of every row against its checksum (``GalleryStore.verify``,
  what the server runs at start-up) vs one plain ``read`` pass over the vector file (both page-cache warm);
* search: ``GalleryStore.search`` (top-10, one query; the per-use checks of the database and files included)
  vs ``top_k`` called directly on a memory map of the same vectors.

    python benchmarks/gallery_integrity.py [--rows 100000] [--dim 1024] [--batch 4096] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's app, not an installed one
from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.runtime.retrieval import get_kernel, top_k


def timed(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of ``reps`` runs after one warm-up."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def plain_read(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    vecs = np.abs(rng.standard_normal((args.rows, args.dim), dtype=np.float32))
    ref = ModelRef("bench", "0" * 64, "order-embedding", "order", args.dim)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        root = Path(tmp) / "galleries"
        store = GalleryStore(root, scorer="numpy")
        store.create("g", kind="images", model=ref)
        batches = range(0, args.rows, args.batch)
        t0 = time.perf_counter()
        for s in batches:
            part = vecs[s : s + args.batch]
            store.add("g", part, ids=[str(i) for i in range(s, s + len(part))])
        t_add = time.perf_counter() - t0
        raw = Path(tmp) / "raw.f32"
        t0 = time.perf_counter()
        with open(raw, "wb") as f:
            for s in batches:
                f.write(vecs[s : s + args.batch].tobytes())
                f.flush()
                os.fsync(f.fileno())
        t_raw = time.perf_counter() - t0

        path = root / "g" / "vectors.f32"
        t_verify = timed(lambda: GalleryStore(root, scorer="numpy").verify("g"), args.reps)
        t_read = timed(lambda: plain_read(path), args.reps)

        q = vecs[:1] * 0.5
        kernel = get_kernel("numpy")
        mapped = np.memmap(path, dtype="<f4", mode="c", shape=(args.rows, args.dim))
        t_topk = timed(lambda: top_k(q, mapped, 10, metric="order_violation", kernel=kernel), args.reps)
        t_search = timed(lambda: store.search("g", q, 10, query_kind="captions"), args.reps)

    mib = vecs.nbytes / 2**20
    print(f"gallery: {args.rows} rows x {args.dim} dims ({mib:.0f} MiB), appends of {args.batch} rows\n")
    print(f"{'operation':44} {'ours':>10} {'baseline':>10} {'ratio':>7}")
    rows = [
        ("append (rows/s) vs write+fsync", args.rows / t_add, args.rows / t_raw, t_add / t_raw, "{:10.0f}"),
        ("full verification (s) vs one read pass", t_verify, t_read, t_verify / t_read, "{:10.3f}"),
        ("search top-10, 1 query (ms) vs top_k", t_search * 1e3, t_topk * 1e3, t_search / t_topk, "{:10.2f}"),
    ]
    for name, ours, base, ratio, fmt in rows:
        print(f"{name:44} {fmt.format(ours)} {fmt.format(base)} {ratio:7.2f}")
    print("\nratio: time ours / time baseline (append: rows/s shown, ratio of times)")


if __name__ == "__main__":
    main()
