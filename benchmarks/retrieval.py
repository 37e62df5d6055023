"""Top-10 order-violation retrieval over random order-space galleries, against same-run baselines.

Galleries are non-negative unit vectors (dim 1024 by default). For each size the table gives the time of one
plain pass over the gallery (``numpy.sum``: the memory-bandwidth baseline), then per kernel the latency of one
query and of a batch of 32, the peak extra memory of a search, and the ratios the targets are set on:
one query <= 2 x the sum pass, a batch of 32 <= 4 x one query, the numpy fallback <= 1.5 x the numba kernel.

Kernels: ``numba``, ``pruned`` and ``numpy`` (the service's three; ``pruned`` is the numba kernel plus the
bound-pruned exact top-k of ``order_pruning``, its "visited" column the share of (query, item, 16-dim block)
triples it read), and the ones they replaced, kept here as baselines:
``torch-prev`` (the torch.compile kernel, needs a C compiler) and ``numpy-prev`` (einsum per query). The
first check asserts that the new kernels' top-10 scores are bit-identical to ``torch-prev``'s (on AVX-512
hosts, where it used 16 lanes).

The machine may be shared: every timing is taken ``--reps`` times, the kernels interleaved round-robin, and
the table shows the best (``min``) and the median; the load average before and after is printed. With
``--wait-idle S`` each timing waits (up to S seconds) until the cores are >= 90% idle.

The CPU and the numba kernel's code path are printed first (vector ISA, checked in the compiled assembly:
zmm or ymm registers; lanes; block shape); beside the batch, the ALU floor: vector operations per element and
pair / (pipes x lanes x clock x cores), with the assumptions stated (``--pipes``; the clock from lscpu or
/proc/cpuinfo), and how many cores' worth of ALU rate the machine gives two threads at once. ``--variants``
adds the in-cache rate of other block shapes. To measure the AVX2 code on an AVX-512 host:
``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=<the host's features without +avx512*>``.

Galleries: the synthetic one above (``--sizes``; 100k rows by default, ``--full`` adds the issue's 1M x 1024,
a 4 GiB array), and with ``--real N`` one of real vectors: N image embeddings of the demo model (64-d, the
only trained order model in the repository) over its synthetic world's images, queried by caption
embeddings (caption side), and N caption embeddings queried by image embeddings (image side).

Cosine and negative cosine (``dot_metrics_section``): top-10 over a ``--dot-size`` x ``--dim`` gallery of
signed rows with norms over 1e-2..1e2 (and zero rows), 1 query and a batch, against the same-run sum pass;
``cosine`` is the service's path (each row's canonical norm computed once, as a gallery keeps them) and
``cosine-before`` the former one (norms recomputed block by block on every search), checked identical first.
``--dot-only`` prints just that table.

    python benchmarks/retrieval.py [--sizes 100000] [--full] [--real 200000] [--sides caption image]
        [--kernels numba pruned numpy torch-prev numpy-prev] [--pipes 2] [--variants]
        [--dot-metrics cosine cosine-before negative_cosine] [--dot-size 100000] [--dot-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's app, not an installed one
from lnserve.app.runtime.retrieval import Side, TopK, get_kernel, row_norms, top_k

Gallery = tuple[str, np.ndarray, np.ndarray, Side]  # label, items, queries, query side


class TorchPrev:
    """The torch.compile kernel the service used before numba (gallery rows outer, queries inner)."""

    name = "torch-prev"

    def __init__(self) -> None:
        import torch

        def caption_side(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return (q[None, :, :] - v[:, None, :]).clamp_min(0).square().sum(-1)

        def image_side(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return (v[:, None, :] - q[None, :, :]).clamp_min(0).square().sum(-1)

        self._torch = torch
        self._fns = {
            "caption": torch.compile(caption_side, dynamic=True),
            "image": torch.compile(image_side, dynamic=True),
        }

    def order_violation(self, queries: np.ndarray, items: np.ndarray, query_side: Side) -> np.ndarray:
        with self._torch.no_grad():
            q = self._torch.from_numpy(np.ascontiguousarray(queries))
            return self._fns[query_side](q, self._torch.from_numpy(items)).numpy().T


class NumpyPrev:
    """The numpy kernel the service used before: per query subtract / clamp / einsum, chunks on 2 threads."""

    name = "numpy-prev"

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(min(8, os.cpu_count() or 1))

    def order_violation(self, queries: np.ndarray, items: np.ndarray, query_side: Side) -> np.ndarray:
        n, dim = items.shape
        rows = max(8, (1 << 17) // dim)
        out = np.empty((queries.shape[0], n), dtype=np.float32)
        starts = list(range(0, n, rows))
        per = -(-len(starts) // self._pool._max_workers)
        jobs = [starts[i : i + per] for i in range(0, len(starts), per)]
        for f in [self._pool.submit(self._scan, queries, items, s, rows, out) for s in jobs]:
            f.result()
        return out

    @staticmethod
    def _scan(queries: np.ndarray, items: np.ndarray, starts: list[int], rows: int, out: np.ndarray) -> None:
        buf = np.empty((min(rows, items.shape[0]), items.shape[1]), dtype=np.float32)
        for start in starts:
            chunk = items[start : start + rows]
            b = buf[: chunk.shape[0]]
            for qi, q in enumerate(queries):
                np.subtract(q, chunk, out=b)
                np.maximum(b, np.float32(0), out=b)
                out[qi, start : start + chunk.shape[0]] = np.einsum("ij,ij->i", b, b)


def random_gallery(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """abs(normal) rows, L2-normalised, generated in slices to keep the peak at ~1 x the gallery."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 65536):
        block = np.abs(rng.standard_normal((min(65536, n - s), dim), dtype=np.float32))
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[s : s + block.shape[0]] = block
    return out


def real_galleries(n: int, batch: int) -> list[Gallery]:
    """The demo model's embeddings of its world: images (gallery) for caption queries, captions (gallery)
    for image queries."""
    from lnserve.app.runtime.engine import Engine
    from lnserve.app.training.world import World

    engine = Engine.open(Path(__file__).resolve().parents[1] / "app" / "demo_model")
    world = World()
    gallery = world.split("bench-gallery", n)
    probe = world.split("bench-queries", batch)
    images = engine.encode_images(gallery.images)
    captions = engine.encode_sentences(gallery.captions[::5][:n])  # one caption per image
    q_captions = engine.encode_sentences(probe.captions[::5][:batch])
    q_images = engine.encode_images(probe.images)
    return [
        (f"demo{images.shape[1]}", np.ascontiguousarray(images), np.ascontiguousarray(q_captions), "caption"),
        (f"demo{images.shape[1]}", np.ascontiguousarray(captions), np.ascontiguousarray(q_images), "image"),
    ]


def peak_extra_mib(fn: Callable[[], object]) -> float:
    """Extra memory of one call: max of numpy's traced peak and the process RSS high-water growth."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    fn()
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    return max(traced, rss) / 2**20


def build_kernels(names: list[str]) -> dict[str, Any]:
    kernels: dict[str, Any] = {}
    for name in names:
        t0 = time.perf_counter()
        if name == "torch-prev":
            if not (shutil.which("cc") or shutil.which("gcc")):
                print("torch-prev needs a C compiler: skipped")
                continue
            kernel: Any = TorchPrev()
        elif name == "numpy-prev":
            kernel = NumpyPrev()
        else:
            kernel = get_kernel(name)
            if kernel.name != name:
                print(f"kernel {name} unavailable, skipped")
                continue
        probe = random_gallery(4, 1024, seed=9)
        kernel.order_violation(probe[:1], probe, "caption")  # torch.compile builds here
        kernel.order_violation(probe, probe, "caption")
        kernels[name] = kernel
        print(f"built {name} in {time.perf_counter() - t0:.1f} s")
    return kernels


def check_identical(
    kernels: dict[str, Any], gallery: np.ndarray, queries: np.ndarray, side: Side = "caption"
) -> None:
    """Top-10 positions and scores of every kernel against torch-prev (or numba), bit for bit."""
    ref_name = "torch-prev" if "torch-prev" in kernels else "numba"
    if ref_name not in kernels:
        return
    part = gallery[:100_000]
    ref = top_k(queries, part, 10, metric="order_violation", query_side=side, kernel=kernels[ref_name])
    for name, kernel in kernels.items():
        if name in (ref_name, "numpy-prev"):
            continue
        got = top_k(queries, part, 10, metric="order_violation", query_side=side, kernel=kernel)
        same = all(
            np.array_equal(a, b) and np.array_equal(c, d)
            for a, b, c, d in zip(got.positions, ref.positions, got.scores, ref.scores, strict=True)
        )
        print(
            f"{name}: top-10 of {len(queries)} {side} queries x {len(part)} items "
            f"identical to {ref_name}: {same}"
        )


def alu_ceiling(dim: int, batch: int, reps: int) -> float:
    """The numba kernel's in-cache rate on one thread, in query x row x dim terms per second: a 256-row tile
    (1 MiB at dim 1024) scored against the batch over and over, so memory never waits. A batch over n rows
    cannot beat ``batch * n * dim / (rate * cores)``."""
    from lnserve.app.runtime import numba_kernel

    tile = random_gallery(256, dim, seed=3)
    queries = random_gallery(batch, dim, seed=4)
    out = np.empty((batch, len(tile)), dtype=np.float32)
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()  # CPU time of this thread: other load on the machine does not count
        for _ in range(20):
            numba_kernel.scan(
                queries, tile, out, 0, len(tile), numba_kernel.tile_rows(dim), numba_kernel.CAPTION
            )
        best = min(best, time.thread_time() - t0)
    return 20 * batch * len(tile) * dim / best


def code_path() -> dict[str, Any]:
    """The numba kernel's code on this host: vector ISA (checked in the compiled assembly: zmm registers
    or not), register lanes, block shape, the subtraction's form."""
    import re

    from lnserve.app.runtime import numba_kernel as nk

    probe = nk.build_scan(nk.QUERY_BLOCK, nk.ROW_BLOCK, nk.FMA_SUB)
    q = random_gallery(8, 64, seed=5)
    probe(q, q, np.empty((8, 8), dtype=np.float32), 0, 8, 8, nk.CAPTION, np.float32(1))
    asm = "".join(probe.inspect_asm().values())
    zmm = len(re.findall(r"%zmm", asm))
    return {
        "isa": nk.ISA,
        "asm": "zmm" if zmm else "ymm" if re.search(r"%ymm", asm) else "xmm/other",
        "lanes": 16 if zmm else 8 if re.search(r"%ymm", asm) else 4,
        "block": f"{nk.QUERY_BLOCK}x{nk.ROW_BLOCK}",
        "sub": "fma(a, 1, -b)" if nk.FMA_SUB else "a - b",
    }


def clock_ghz() -> tuple[float, str]:
    """The core clock and where it came from: lscpu's max MHz (the boost clock) where it has one, else
    /proc/cpuinfo's current MHz (a VM often shows only the base clock there)."""
    import subprocess

    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in lscpu.splitlines():
            if line.startswith("CPU max MHz:"):
                return float(line.split(":")[1]) / 1e3, "lscpu max MHz"
    except OSError:
        pass
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1]) / 1e3, "/proc/cpuinfo cpu MHz"
    return float("nan"), "unknown"


def alu_floor_s(pairs_dims: float, ops: int, pipes: int, lanes: int, ghz: float, cores: int) -> float:
    """Seconds a batch cannot beat: ``ops`` vector operations per element and pair over
    ``pipes x lanes x clock x cores`` lane-operations per second."""
    return pairs_dims * ops / (pipes * lanes * ghz * 1e9 * cores)


def variant_rates(dim: int, batch: int, reps: int) -> dict[str, tuple[float, float]]:
    """In-cache rate (G query-row-dims/s, 1 thread; order violation, dot) of block shapes and subtraction
    forms: what ``numba_kernel.BLOCK_SHAPES`` is chosen from, measured on this host's code path."""
    from lnserve.app.runtime import numba_kernel as nk

    tile = random_gallery(256, dim, seed=3)
    queries = random_gallery(batch, dim, seed=4)
    out = np.empty((batch, len(tile)), dtype=np.float32)
    rates = {}
    for qb, rb, fma in ((4, 4, True), (4, 4, False), (2, 2, True), (2, 2, False), (4, 2, True), (2, 4, True)):
        scan = nk.build_scan(qb, rb, fma)
        got = []
        for mode in (nk.CAPTION, nk.DOT):
            scan(queries, tile, out, 0, len(tile), nk.tile_rows(dim), mode, np.float32(1))
            best = float("inf")
            for _ in range(reps):
                t0 = time.thread_time()
                for _ in range(10):
                    scan(queries, tile, out, 0, len(tile), nk.tile_rows(dim), mode, np.float32(1))
                best = min(best, time.thread_time() - t0)
            got.append(10 * batch * len(tile) * dim / best / 1e9)
        rates[f"{qb}x{rb} {'fma-sub' if fma else 'sub'}"] = (got[0], got[1])
    return rates


def alu_cores(dim: int, batch: int, reps: int) -> float:
    """How many cores' worth of ALU throughput the machine gives a batch: the in-cache rate of one thread
    per core, all at once, over the rate of one thread alone (best of ``reps`` each). Below the core count
    when other load or SMT siblings (vCPUs that share a physical core's pipes) take the pipes."""
    from concurrent.futures import ThreadPoolExecutor

    from lnserve.app.runtime import numba_kernel as nk

    cores = os.cpu_count() or 1
    tile = random_gallery(256, dim, seed=3)
    queries = random_gallery(batch, dim, seed=4)
    outs = [np.empty((batch, len(tile)), dtype=np.float32) for _ in range(cores)]

    def work(i: int) -> None:
        for _ in range(10):
            nk.scan(queries, tile, outs[i], 0, len(tile), nk.tile_rows(dim), nk.CAPTION)

    best = {1: float("inf"), cores: float("inf")}
    with ThreadPoolExecutor(cores) as pool:
        for _ in range(reps):
            for threads in best:
                t0 = time.perf_counter()
                list(pool.map(work, range(threads)))
                best[threads] = min(best[threads], (time.perf_counter() - t0) / threads)
    return best[1] / best[cores]


def cpu_idle_fraction(window: float = 0.5) -> float:
    """Share of the machine's CPU time that was idle over ``window`` seconds (Linux /proc/stat)."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]

    total0, idle0 = sample()
    time.sleep(window)
    total1, idle1 = sample()
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_idle(limit: float) -> None:
    """On a shared machine: wait (at most ``limit`` s) until other processes leave the cores >= 90% idle."""
    deadline = time.monotonic() + limit
    while limit > 0 and time.monotonic() < deadline and Path("/proc/stat").exists():
        if cpu_idle_fraction() >= 0.9:
            return


def measure(
    jobs: dict[tuple[str, int], Callable[[], object]], reps: int, idle_wait: float
) -> dict[tuple[str, int], Any]:
    """Wall and process CPU seconds (all threads) of every job, ``reps`` rounds, round-robin so a burst of
    load hits every kernel alike; with ``idle_wait``, each timing starts once the machine is idle."""
    times: dict[tuple[str, int], Any] = {key: ([], []) for key in jobs}
    for fn in jobs.values():  # warm-up
        fn()
    for _ in range(reps):
        for key, fn in jobs.items():
            wait_idle(idle_wait)
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[key][0].append(time.perf_counter() - t0)
            times[key][1].append(time.process_time() - c0)
    return times


def run_gallery(
    kernels: dict[str, Any], gallery: Gallery, args: argparse.Namespace
) -> tuple[Gallery, dict[tuple[str, int], Any], dict[str, float], list[str], dict[tuple[str, int], float]]:
    """Every kernel on one gallery, interleaved with the sum pass; plus the pruned scan's visited share."""
    _, items, queries, side = gallery
    n = len(items)
    active = {k: v for k, v in kernels.items() if not (k.startswith("numpy") and n > args.numpy_max)}
    if side == "image":  # the baselines from before numba only ever ran caption queries
        active = {k: v for k, v in active.items() if k in ("numba", "pruned", "numpy")}
    jobs: dict[tuple[str, int], Callable[[], object]] = {("sum", 1): lambda g=items: np.sum(g)}
    for name, kernel in active.items():
        for nq in (1, args.batch):
            jobs[(name, nq)] = lambda q=queries[:nq], g=items, k=kernel: top_k(
                q, g, 10, metric="order_violation", query_side=side, kernel=k
            )
    times = measure(jobs, args.reps, args.wait_idle)
    visited: dict[tuple[str, int], float] = {}
    if "pruned" in active:
        for nq in (1, args.batch):
            jobs[("pruned", nq)]()
            visited[("pruned", nq)] = active["pruned"].last_visited_fraction
    mem = {name: peak_extra_mib(jobs[(name, args.batch)]) for name in active}
    return gallery, times, mem, list(active), visited


# -- cosine and negative cosine (issue 33) -----------------------------------------------------------------
DOT_METRICS = ("cosine", "cosine-before", "negative_cosine")


def dot_gallery(n: int, dim: int, seed: int) -> np.ndarray:
    """Signed normal rows whose norms spread over 1e-2..1e2 (skip-thoughts vectors are not unit), a few zero
    rows among them; generated in slices like ``random_gallery``."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 65536):
        m = min(65536, n - s)
        out[s : s + m] = rng.standard_normal((m, dim), dtype=np.float32)
        out[s : s + m] *= (10.0 ** rng.uniform(-2, 2, (m, 1))).astype(np.float32)
    out[:: max(1, n // 7)] = 0.0
    return out


def dot_search(metric: str, kernel: Any, norms: np.ndarray) -> Callable[[np.ndarray, np.ndarray], TopK]:
    """One top-10 search of ``metric``: ``cosine`` with the norms computed once (as a gallery keeps them),
    ``cosine-before`` the former path (norms recomputed block by block on every search)."""
    if metric == "cosine":
        return lambda q, g: top_k(q, g, 10, metric="cosine", kernel=kernel, item_norms=norms)
    if metric == "cosine-before":
        return lambda q, g: top_k(q, g, 10, metric="cosine", kernel=kernel)
    return lambda q, g: top_k(q, g, 10, metric="negative_cosine", kernel=kernel)


def dot_metrics_section(kernels: dict[str, Any], args: argparse.Namespace) -> None:
    """Top-10 cosine and negative cosine over ``--dot-size`` x ``--dim`` galleries, 1 query and a batch,
    interleaved with the same-run ``numpy.sum`` pass; first checks that the kept-norms path returns the
    former path's ids and scores bit for bit."""
    kernel = kernels.get("numba") or get_kernel()
    n, dim, b = args.dot_size, args.dim, args.batch
    items = dot_gallery(n, dim, seed=5)
    queries = dot_gallery(b, dim, seed=6)[::-1].copy()  # the zero row last: only the batch has one
    t0 = time.perf_counter()
    norms = row_norms(items)
    t_norms = time.perf_counter() - t0
    for nq in (1, b):
        new = dot_search("cosine", kernel, norms)(queries[:nq], items)
        old = dot_search("cosine-before", kernel, norms)(queries[:nq], items)
        same = all(
            np.array_equal(a, c) and np.array_equal(x, y)
            for a, c, x, y in zip(new.positions, old.positions, new.scores, old.scores, strict=True)
        )
        print(f"cosine with kept norms, {nq} queries x {n} items: identical to cosine-before: {same}")
    jobs: dict[tuple[str, int], Callable[[], object]] = {("sum", 1): lambda: np.sum(items)}
    for metric in args.dot_metrics:
        search = dot_search(metric, kernel, norms)
        for nq in (1, b):
            jobs[(metric, nq)] = lambda q=queries[:nq], f=search: f(q, items)
    times = measure(jobs, args.reps, args.wait_idle)
    best = {key: min(w) for key, (w, _) in times.items()}
    med = {key: statistics.median(w) for key, (w, _) in times.items()}
    cpu_s = {key: min(c) for key, (_, c) in times.items()}
    base = best[("sum", 1)]
    print(f"\ntop-10 cosine / negative cosine, float32, kernel {kernel.name}, batch {b}; "
          f"wall: best (median) of {args.reps}")  # fmt: skip
    print(
        f"{'metric':16} {'items':>8} {'dim':>4} {'sum pass':>8} {'1 query':>15} {'1q/sum':>6} "
        f"{f'{b} queries':>17} {f'{b}q/1q':>6} {'cpu ratio':>9} {f'{b}q/sum':>7}"
    )
    for metric in args.dot_metrics:
        one, many = best[(metric, 1)], best[(metric, b)]
        print(
            f"{metric:16} {n:>8} {dim:>4} {base * 1e3:6.1f}ms "
            f"{one * 1e3:6.1f} ({med[(metric, 1)] * 1e3:5.0f})ms "
            f"{one / base:5.2f}x {many * 1e3:7.1f} ({med[(metric, b)] * 1e3:6.0f})ms {many / one:5.2f}x "
            f"{cpu_s[(metric, b)] / cpu_s[(metric, 1)]:8.2f}x {many / base:6.2f}x"
        )
    print(
        f"norms computed once (row_norms, paid at a gallery's first cosine search per state): "
        f"{t_norms * 1e3:.0f} ms = {t_norms / base:.1f} x the sum pass"
    )
    print(f"targets: cosine and negative_cosine 1q/sum <= 1.50x, {b}q/1q <= 6.00x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    ap.add_argument("--full", action="store_true", help="also the issue's 1M x 1024 gallery (4 GiB)")
    ap.add_argument("--real", type=int, default=0, help="also the demo model's real vectors, this many items")
    ap.add_argument("--sides", nargs="+", default=["caption", "image"], choices=["caption", "image"])
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--kernels", nargs="+", default=["numba", "pruned", "numpy", "torch-prev", "numpy-prev"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--numpy-max", type=int, default=200_000, help="skip numpy kernels above this size")
    ap.add_argument(
        "--pipes", type=int, default=2, help="ALU floor: vector FP pipes per core that take any of the ops"
    )
    ap.add_argument("--variants", action="store_true", help="also the in-cache rate of other block shapes")
    ap.add_argument(
        "--wait-idle", type=float, default=0.0, help="shared machine: wait up to this many s for idle cores"
    )
    ap.add_argument(
        "--dot-metrics",
        nargs="*",
        default=list(DOT_METRICS),
        choices=DOT_METRICS,
        help="cosine rows (cosine-before: the former per-search norms); none: skip them",
    )
    ap.add_argument("--dot-size", type=int, default=100_000, help="rows of the cosine gallery")
    ap.add_argument("--dot-only", action="store_true", help="only the cosine / negative cosine table")
    args = ap.parse_args()
    sizes = list(args.sizes) + ([1_000_000] if args.full and 1_000_000 not in args.sizes else [])
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "unknown",
    ) if Path("/proc/cpuinfo").exists() else "unknown"  # fmt: skip
    print(f"cpu: {cpu}; load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
    path = code_path() if "numba" in args.kernels or "pruned" in args.kernels else None
    if path:
        print(
            f"numba code path: {path['isa']} ({path['asm']} registers in the compiled scan, {path['lanes']} "
            f"float lanes per register), block {path['block']} queries x rows, subtraction {path['sub']} "
            "(NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=<host features without +avx512*> forces avx2)"
        )

    kernels = build_kernels(args.kernels)
    if args.dot_only:
        dot_metrics_section(kernels, args)
        print(f"load average after: {os.getloadavg()}")
        return
    rows = []
    for n in sizes:
        items = random_gallery(n, args.dim)
        queries = random_gallery(args.batch, args.dim, seed=1)
        for side in args.sides:
            if n == sizes[0]:
                check_identical(kernels, items, queries, side)
            rows.append(run_gallery(kernels, ("synthetic", items, queries, side), args))
        del items
    if args.real:
        for gallery in real_galleries(args.real, args.batch):
            if gallery[3] in args.sides:
                check_identical(kernels, gallery[1], gallery[2], gallery[3])
                rows.append(run_gallery(kernels, gallery, args))
    rate = alu_ceiling(args.dim, args.batch, args.reps) if "numba" in kernels else float("nan")

    b = args.batch
    print(f"\ntop-10 order violation, float32, batch {b}; wall: best (median) of {args.reps}")
    print(
        f"{'gallery':>9} {'items':>8} {'dim':>4} {'side':7} {'kernel':10} {'sum pass':>8} {'1 query':>15} "
        f"{'1q/sum':>6} {f'{b} queries':>17} {f'{b}q/1q':>6} {'cpu ratio':>9} {'1q/numba':>8} "
        f"{f'{b}q/numba':>9} {'visited':>11} {'peak+MiB':>8}"
    )
    for (label, items, _, side), times, mem, names, visited in rows:
        n, dim = items.shape
        best = {key: min(w) for key, (w, _) in times.items()}
        med = {key: statistics.median(w) for key, (w, _) in times.items()}
        cpu_s = {key: min(c) for key, (_, c) in times.items()}
        base = best[("sum", 1)]
        for name in names:
            one, many = best[(name, 1)], best[(name, b)]
            vs1 = one / best[("numba", 1)] if ("numba", 1) in best else float("nan")
            vsb = many / best[("numba", b)] if ("numba", b) in best else float("nan")
            seen = f"{visited[(name, 1)]:.3f}/{visited[(name, b)]:.3f}" if (name, 1) in visited else "1"
            print(
                f"{label:>9} {n:>8} {dim:>4} {side:7} {name:10} {base * 1e3:6.1f}ms "
                f"{one * 1e3:6.1f} ({med[(name, 1)] * 1e3:5.0f})ms {one / base:5.2f}x "
                f"{many * 1e3:7.1f} ({med[(name, b)] * 1e3:6.0f})ms {many / one:5.2f}x "
                f"{cpu_s[(name, b)] / cpu_s[(name, 1)]:8.2f}x {vs1:7.2f}x {vsb:8.2f}x {seen:>11} "
                f"{mem[name]:8.1f}"
            )
    cores = os.cpu_count() or 1
    print(f"cpu ratio: process CPU seconds of {b} queries / of 1 query (all threads; robust to other load)")
    print(f"visited: share of (query, item, 16-dim block) triples the pruned scan read, 1 query/{b} queries")
    print(f"numba in-cache rate, 1 thread: {rate / 1e9:.1f} G query-row-dims/s (the ALU ceiling)")
    if path:
        ghz, source = clock_ghz()
        lanes = path["lanes"]
        print(
            f"ALU floor = vector ops per element and pair / (pipes x lanes x clock x cores); assumed: "
            f"{args.pipes} pipes (--pipes), {lanes} lanes ({path['asm']}), {ghz:.2f} GHz ({source}), "
            f"{cores} cores; order violation 4 ops (sub, max, mul, add), dot 2 (mul, add)"
        )
        for (label, items, _, side), times, _, names, _ in rows:
            if "numba" not in names:
                continue
            pd = b * len(items) * items.shape[1]
            floor = alu_floor_s(pd, 4, args.pipes, lanes, ghz, cores)
            one, many = min(times[("numba", 1)][0]), min(times[("numba", b)][0])
            print(
                f"  {label} {len(items)} items, {side}: {b} queries' ALU floor {floor * 1e3:.0f} ms "
                f"= {floor / one:.2f} x 1 query; measured {many * 1e3:.0f} ms = {many / floor:.2f} x it "
                f"(dot products: floor {alu_floor_s(pd, 2, args.pipes, lanes, ghz, cores) * 1e3:.0f} ms)"
            )
    if path:
        print(
            f"ALU scaling: {cores} threads at once run {alu_cores(args.dim, b, args.reps):.2f} x 1 thread's "
            "in-cache rate (below the core count: other load, or vCPUs sharing a physical core)"
        )
    if args.variants and path:
        print(
            f"in-cache rate of kernel variants, 1 thread, {path['isa']} code, G query-row-dims/s (ov, dot):"
        )
        for variant, (ov, dot) in variant_rates(args.dim, b, args.reps).items():
            print(f"  {variant:14} {ov:6.1f} {dot:6.1f}")
    for (label, items, _, side), times, _, names, _ in rows:
        if "numba" in names and items.shape[1] == args.dim:
            floor = b * len(items) * args.dim / (rate * cores)
            one = min(times[("numba", 1)][0])
            print(
                f"  {label} {len(items)} items, {side}: {b} queries need >= {floor * 1e3:.0f} ms on {cores} "
                f"cores = {floor / one:.2f} x the measured 1-query time"
            )
    print(f"targets: 1q/sum <= 2.00x, {b}q/1q <= 4.00x, numpy {b}q/numba <= 1.50x")
    print(f"issue 24 (pruned): 1q/sum < 1.00x, {b}q/1q <= 2.00x, ids and scores identical to the full scan")
    if args.dot_metrics:
        dot_metrics_section(kernels, args)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
