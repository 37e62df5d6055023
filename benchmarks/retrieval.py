"""Top-10 order-violation retrieval over random order-space galleries, against a same-run bandwidth baseline.

Galleries are non-negative unit vectors (dim 1024 by default). For each size the table gives the time of one
plain pass over the gallery (``numpy.sum``: the memory-bandwidth baseline), then per kernel the latency of one
query and of a batch of 32, the peak extra memory of a search, and the two ratios the targets are set on:
single query <= 2 x baseline, batch of 32 <= 4 x single query.

    python benchmarks/retrieval.py [--sizes 100000 1000000] [--kernels compiled numpy] [--reps 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's app, not an installed one
from lnserve.app.runtime.retrieval import get_kernel, top_k


def random_gallery(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """abs(normal) rows, L2-normalised, generated in slices to keep the peak at ~1 x the gallery."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 65536):
        block = np.abs(rng.standard_normal((min(65536, n - s), dim), dtype=np.float32))
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[s : s + block.shape[0]] = block
    return out


def timed(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of ``reps`` runs after one warm-up."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_extra_mib(fn: Callable[[], object]) -> float:
    """Extra memory of one call: max of numpy's traced peak and the process RSS high-water growth."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    fn()
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    return max(traced, rss) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--kernels", nargs="+", default=["compiled", "numpy"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--numpy-max", type=int, default=200_000, help="skip the numpy kernel above this size")
    args = ap.parse_args()

    rows = []
    for n in args.sizes:
        gallery = random_gallery(n, args.dim)
        queries = random_gallery(args.batch, args.dim, seed=1)
        base = timed(lambda g=gallery: np.sum(g), args.reps)
        for name in args.kernels:
            if name == "numpy" and n > args.numpy_max:
                continue
            kernel = get_kernel(name)
            if kernel.name != name:
                print(f"kernel {name} unavailable, skipped")
                continue

            def search(q: np.ndarray, g: np.ndarray = gallery, kern: object = kernel) -> object:
                return top_k(q, g, 10, metric="order_violation", kernel=kern)  # type: ignore[arg-type]

            one = timed(lambda s=search, qs=queries: s(qs[:1]), args.reps)
            many = timed(lambda s=search, qs=queries: s(qs), max(1, args.reps // 2))
            mem = peak_extra_mib(lambda s=search, qs=queries: s(qs))
            rows.append((n, name, base, one, many, mem))
        del gallery

    row_bytes = args.dim * 4
    print(f"\ntop-10 order violation, dim {args.dim}, float32, batch {args.batch}; median of {args.reps}")
    head = (
        f"{'items':>9} {'kernel':9} {'sum pass':>9} {'GB/s':>6} {'1 query':>9} {'1q/sum':>7} "
        f"{f'{args.batch}q':>9} {'per q':>8} {f'{args.batch}q/1q':>7} {'peak+MiB':>9}"
    )
    print(head)
    for n, name, base, one, many, mem in rows:
        print(
            f"{n:>9} {name:9} {base * 1e3:7.1f}ms {n * row_bytes / base / 1e9:6.1f} {one * 1e3:7.1f}ms "
            f"{one / base:6.2f}x {many * 1e3:7.1f}ms {many / args.batch * 1e3:6.2f}ms {many / one:6.2f}x "
            f"{mem:9.1f}"
        )
    print("targets: 1q/sum <= 2.00x, 32q/1q <= 4.00x")


if __name__ == "__main__":
    main()
