"""Exact brute-force top-k for order violation, negative cosine and cosine, with bounded memory.

No ANN index supports order violation, so retrieval is a chunked scan: each block of gallery rows is scored
against all queries, the block's best k per query are picked by partial selection (``np.partition``, no full
sort) and merged with the running best. Ties are broken by gallery position (insertion order), so results
are deterministic.

Two kernels compute the order violation ``E(c, v) = sum_k max(0, c_k - v_k)^2``, with bit-identical floats:

* ``numba`` (``numba_kernel.py``): a hand-tiled kernel in explicit 16-lane vectors, blocked over queries and
  gallery rows so a tile of rows is scored against every query from cache; JIT-compiled by numba (no C
  compiler needed, cached on disk, built in the background). One query scans at memory bandwidth; a batch
  is bound by the ALUs.
* ``numpy``: the same arithmetic in the same order with numpy ufuncs on transposed L2-sized chunks (for
  platforms without numba); several passes per query instead of one, so a batch is slower.

The summation order is fixed (lane ``l`` of 16 sums dims ``l, l + 16, ...``, lanes folded pairwise): it is
the order the former torch.compile kernel used on AVX-512 hosts, so scores are bit-identical to it, and it no
longer depends on the CPU's vector width. It is not numpy's einsum order (``scoring.order_violation``, used
by evaluation), which differs in the last bit for about half the pairs.

Earlier, measured: lower-bound pruning on the m dims where the query is largest (then a column gather) pruned
nothing for m <= 128 on the benchmark's random 1024-d unit vectors. ``pruned`` below prunes on the running
k-th best instead, block by block; it stays opt-in because on such vectors it still reads 70-87% of the blocks
at a higher cost per element than the register-blocked full scan (``benchmarks/retrieval.py``).

``pruned`` (``order_pruning.py``) is the numba kernel plus a top-k that drops an item once its partial sum
is surely above the k-th best, then scores the survivors canonically: same ids and scores, less work where
the data lets partial sums grow fast.

The service's ``scorer`` setting (``LNSERVE_SCORER``) picks one; callers that name none get ``auto``
(numba when it imports, else numpy; ``compiled`` is an alias of ``numba``). A numba kernel that fails to
build falls back to numpy with a warning.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Protocol, cast

import numpy as np

from ...converters.families import lookup

log = logging.getLogger("lnserve.retrieval")

Metric = Literal["order_violation", "negative_cosine", "cosine"]
Side = Literal["caption", "image"]
METRICS: dict[str, dict[str, str]] = {
    "order_violation": {
        "direction": "lower_is_better",
        "meaning": "order violation E(c, i) = sum_k max(0, c_k - i_k)^2 (caption c, image i; 0 = perfect)",
    },
    "negative_cosine": {
        "direction": "lower_is_better",
        "meaning": "negative cosine -c.i of unit vectors (-1 = perfect)",
    },
    "cosine": {"direction": "higher_is_better", "meaning": "cosine similarity (1 = identical direction)"},
}
SCORERS = ("auto", "numba", "numpy", "compiled", "pruned")
LANES = 16  # the fixed summation order: 16 lanes of partial sums (see numba_kernel)
_BLOCK_FLOATS = 1 << 23  # gallery floats scored per block (32 MiB of float32) before top-k selection


def metric_for(method: str, family: str) -> Metric:
    """The model's own score: the one its family fixes (skip-thoughts: cosine), else by its method: order ->
    order violation, symmetric (cosine) -> negative cosine. An unknown family (a gallery's, read from disk)
    fixes none."""
    known = lookup(family)
    if known is not None and known.metric is not None:
        return cast(Metric, known.metric)
    if method == "order":
        return "order_violation"
    if method == "cosine":
        return "negative_cosine"
    raise ValueError(f"unknown scoring method {method!r}")


def score_info(metric: str) -> dict[str, str]:
    """What a score means and which direction is better; every response carries this."""
    return {"metric": metric, **METRICS[metric]}


# -- kernels ----------------------------------------------------------------------------------------------
class Kernel(Protocol):
    name: str

    def order_violation(self, queries: np.ndarray, items: np.ndarray, query_side: Side) -> np.ndarray:
        """(Q, D) x (n, D) -> (Q, n); ``query_side`` says which slot of E(caption, image) the query fills."""
        ...

    def dot(self, queries: np.ndarray, items: np.ndarray) -> np.ndarray:
        """(Q, D) . (n, D)^T -> (Q, n) in the same fixed lane order (cosine galleries)."""
        ...


class _RowSplit:
    """Spreads a block's gallery rows over one thread per core in contiguous runs (the kernels release the
    GIL); a run's scores do not depend on the split, so threads never change the floats."""

    def __init__(self, threads: int | None) -> None:
        self.threads = max(1, threads or min(8, os.cpu_count() or 1))
        self._pool: ThreadPoolExecutor | None = None

    def run(self, scan: Callable[[int, int], None], n: int, unit: int) -> None:
        """Calls ``scan(start, stop)`` over ``range(n)`` in runs that are multiples of ``unit`` rows."""
        runs = min(self.threads, -(-n // unit))
        if runs <= 1:
            scan(0, n)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="lnserve-scan")
        per = -(-n // runs // unit) * unit
        for f in [self._pool.submit(scan, s, min(n, s + per)) for s in range(0, n, per)]:
            f.result()


class NumbaKernel:
    """The hand-tiled numba kernel (see ``numba_kernel``); building it compiles every variant (~5 s cold,
    well under 1 s from numba's on-disk cache) and checks it against ``NumpyKernel`` bit for bit."""

    name = "numba"

    def __init__(self, threads: int | None = None) -> None:
        from . import numba_kernel

        self._nk = numba_kernel
        self._split = _RowSplit(threads)
        numba_kernel.warm()
        rng = np.random.default_rng(0)
        probe_q = rng.random((5, 37), dtype=np.float32)
        probe_v = rng.random((9, 37), dtype=np.float32)
        for side in ("caption", "image"):
            got = self.order_violation(probe_q, probe_v, side)
            want = NumpyKernel(threads=1).order_violation(probe_q, probe_v, side)
            if not np.array_equal(got, want):
                raise RuntimeError("numba order-violation kernel disagrees with numpy")
        if not np.array_equal(self.dot(probe_q, probe_v), dot_scores(probe_q, probe_v)):
            raise RuntimeError("numba dot kernel disagrees with numpy")

    def order_violation(self, queries: np.ndarray, items: np.ndarray, query_side: Side) -> np.ndarray:
        mode = self._nk.CAPTION if query_side == "caption" else self._nk.IMAGE
        return self._scan(queries, items, mode)

    def dot(self, queries: np.ndarray, items: np.ndarray) -> np.ndarray:
        return self._scan(queries, items, self._nk.DOT)

    def _scan(self, queries: np.ndarray, items: np.ndarray, mode: int) -> np.ndarray:
        q = np.ascontiguousarray(queries, dtype=np.float32)
        v = np.ascontiguousarray(items, dtype=np.float32)  # a gallery block is already one: no copy
        out = np.empty((q.shape[0], v.shape[0]), dtype=np.float32)
        if out.size == 0:
            return out
        tile = self._nk.tile_rows(v.shape[1])
        self._split.run(lambda a, b: self._nk.scan(q, v, out, a, b, tile, mode), v.shape[0], 2 * tile)
        return out


class PrunedKernel(NumbaKernel):
    """The numba kernel plus an exact top-k that skips work (``order_pruning``): ``top_k`` hands
    order-violation searches to ``prune_top_k``, whose ids and scores are bit-identical to the full scan's."""

    name = "pruned"

    def __init__(self, threads: int | None = None) -> None:
        super().__init__(threads)
        from .order_pruning import PrunedSearch

        self._search = PrunedSearch(self._split.threads)
        self._search.warm()

    @property
    def last_visited_fraction(self) -> float:
        """Share of the last search's (query, item, 16-dim block) triples read: the work not skipped."""
        return self._search.last_visited_fraction

    def prune_top_k(
        self, queries: np.ndarray, items: np.ndarray, k: int, query_side: Side, valid: np.ndarray | None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return self._search.top_k(queries, items, k, query_side == "caption", valid)


class NumpyKernel:
    """The numba kernel's arithmetic and order with numpy ufuncs, for platforms without numba.

    Each chunk of rows is copied once into lane order, (dim / 16, rows, 16): 16-dim groups outermost, so
    ``np.add.reduce`` over axis 0 adds the groups one after another into (rows, 16) lanes exactly as the
    numba kernel does, in long contiguous loops; the queries share the copy. Per query: subtract, clamp,
    square, reduce, then the lanes are folded pairwise. Rows are spread over one thread per core."""

    name = "numpy"

    def __init__(self, threads: int | None = None) -> None:
        self._split = _RowSplit(threads)

    def order_violation(self, queries: np.ndarray, items: np.ndarray, query_side: Side) -> np.ndarray:
        q = np.ascontiguousarray(queries, dtype=np.float32)
        n, dim = items.shape
        out = np.empty((q.shape[0], n), dtype=np.float32)
        if out.size == 0:
            return out
        rows = max(8, (1 << 15) // max(dim, 1))  # ~128 KiB chunks: the copy and the scratch stay in L2
        self._split.run(lambda a, b: self._scan(q, items, query_side == "caption", a, b, rows, out), n, rows)
        return out

    def dot(self, queries: np.ndarray, items: np.ndarray) -> np.ndarray:
        return dot_scores(queries, items)

    @staticmethod
    def _scan(
        queries: np.ndarray,
        items: np.ndarray,
        caption: bool,
        start: int,
        stop: int,
        rows: int,
        out: np.ndarray,
    ) -> None:
        groups, tail = divmod(items.shape[1], LANES)
        full = groups * LANES
        rows = min(rows, stop - start)
        lanes = np.empty((groups, rows, LANES), dtype=np.float32)
        scratch = np.empty_like(lanes)
        acc = np.empty((rows, LANES), dtype=np.float32)
        spread = [  # each query repeated along the rows, so the subtraction runs in one contiguous loop
            np.ascontiguousarray(np.broadcast_to(q[:full].reshape(groups, 1, LANES), lanes.shape))
            for q in queries
        ]
        for s in range(start, stop, rows):
            chunk = np.asarray(items[s : min(stop, s + rows)], dtype=np.float32)
            m = chunk.shape[0]
            lane_m, b, acc_m = lanes[:, :m], scratch[:, :m], acc[:m]
            np.copyto(lane_m, chunk[:, :full].reshape(m, groups, LANES).transpose(1, 0, 2))
            for qi, q in enumerate(queries):
                if caption:
                    np.subtract(spread[qi][:, :m], lane_m, out=b)
                else:
                    np.subtract(lane_m, spread[qi][:, :m], out=b)
                np.maximum(b, np.float32(0), out=b)
                np.multiply(b, b, out=b)
                if groups:
                    np.add.reduce(b, axis=0, out=acc_m)
                else:
                    acc_m.fill(0)
                if tail:  # dims full + l go last into lanes l
                    t = q[full:] - chunk[:, full:] if caption else chunk[:, full:] - q[full:]
                    np.maximum(t, np.float32(0), out=t)
                    acc_m[:, :tail] += t * t
                folded = acc_m
                for width in (8, 4, 2, 1):  # lane l += lane l + width
                    folded = folded[:, :width] + folded[:, width : 2 * width]
                out[qi, s : s + m] = folded[:, 0]


_kernels: dict[str, Kernel] = {}
_kernel_lock = threading.Lock()


def get_kernel(name: str | None = None) -> Kernel:
    """The order-violation kernel named by ``name`` (the ``scorer`` setting; default auto), built once per
    process."""
    name = (name or "auto").lower()
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; expected one of {', '.join(SCORERS)}")
    if name == "compiled":  # the former torch.compile kernel's name; numba replaced it
        name = "numba"
    if name == "auto":
        name = "numba" if importlib.util.find_spec("numba") is not None else "numpy"
    with _kernel_lock:
        if name not in _kernels:
            if name in ("numba", "pruned"):
                try:
                    _kernels[name] = PrunedKernel() if name == "pruned" else NumbaKernel()
                except Exception as exc:  # numba missing or broken on this platform: stay correct, slower
                    log.warning("numba scorer unavailable (%s); using numpy", exc)
                    _kernels[name] = NumpyKernel()
            else:
                _kernels[name] = NumpyKernel()
        return _kernels[name]


# -- cosine in the same fixed order ------------------------------------------------------------------
_DOT_FLOATS = 1 << 16  # products per chunk of a dot scan (~256 KiB of float32 scratch: stays in L2)


def _fold(acc: np.ndarray) -> np.ndarray:
    """(..., 16) lane sums -> (...): lane l += lane l + width for width 8, 4, 2, 1 (the kernels' fold)."""
    for width in (8, 4, 2, 1):
        acc = acc[..., :width] + acc[..., width : 2 * width]
    return acc[..., 0]


def _lane_sums(products: np.ndarray) -> np.ndarray:
    """Sums over the last axis of ``products`` (..., D) in the canonical order (lane l of 16 adds dims
    l, l + 16, ... in increasing order, the last D % 16 dims go to lanes 0.., lanes folded pairwise).

    Every step is an elementwise float32 ufunc (no BLAS, no FMA, no pairwise reduction along the summed
    axis), so a sum depends only on its own D numbers: not on the matrix shape, the rows around it or the
    CPU."""
    *lead, dim = products.shape
    groups, tail = divmod(dim, LANES)
    full = groups * LANES
    # (groups, ..., 16) with groups outermost: reducing axis 0 adds the groups one after another
    lanes = np.moveaxis(products[..., :full].reshape(*lead, groups, LANES), -2, 0)
    acc = (
        np.add.reduce(np.ascontiguousarray(lanes), axis=0) if groups else np.zeros((*lead, LANES), np.float32)
    )
    if tail:
        acc = acc.copy() if groups else acc
        acc[..., :tail] += products[..., full:]
    return _fold(acc)


def dot_scores(queries: np.ndarray, items: np.ndarray) -> np.ndarray:
    """(Q, D) . (n, D)^T -> (Q, n) float32 in the fixed lane order: bit-identical for a pair of vectors
    wherever they sit (one store or any shard layout, any block size) and on any CPU. BLAS, which this
    replaces for cosine galleries, picks its summation order by matrix shape and CPU, so planted ties
    landed 1 ulp apart between layouts."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    n, dim = items.shape
    out = np.empty((q.shape[0], n), dtype=np.float32)
    if out.size == 0:
        return out
    rows = max(16, _DOT_FLOATS // max(1, dim))
    per = max(1, 4 * _DOT_FLOATS // (rows * max(1, dim)))  # queries per product tensor
    for s in range(0, n, rows):
        chunk = np.asarray(items[s : s + rows], dtype=np.float32)
        for a in range(0, q.shape[0], per):
            out[a : a + per, s : s + chunk.shape[0]] = _lane_sums(q[a : a + per, None, :] * chunk[None, :, :])
    return out


def row_norms(x: np.ndarray) -> np.ndarray:
    """L2 norm of each row, its sum of squares in the same fixed order as ``dot_scores``: the 16-dim groups
    are added one after another (a loop over groups, each add vectorised over the chunk's rows)."""
    n, dim = x.shape
    groups, tail = divmod(dim, LANES)
    full = groups * LANES
    out = np.empty(n, dtype=np.float32)
    rows = max(1, (1 << 20) // max(1, dim))
    for s in range(0, n, rows):
        chunk = np.asarray(x[s : s + rows], dtype=np.float32)
        sq = chunk * chunk
        acc = np.zeros((chunk.shape[0], LANES), dtype=np.float32)
        by_group = sq[:, :full].reshape(chunk.shape[0], groups, LANES)
        for g in range(groups):
            acc += by_group[:, g]
        acc[:, :tail] += sq[:, full:]
        out[s : s + chunk.shape[0]] = np.sqrt(_fold(acc))
    return out


def _ready_kernel() -> Kernel:
    """A kernel for dot products without waiting for a build: the numba one once it is built, numpy until
    then (their floats are identical, so which one answers never shows)."""
    return _kernels.get("numba") or _kernels.get("numpy") or NumpyKernel()


# -- scoring and top-k ------------------------------------------------------------------------------------
def score_block(
    queries: np.ndarray,
    items: np.ndarray,
    metric: str,
    *,
    query_side: Side = "caption",
    kernel: Kernel | None = None,
    item_norms: np.ndarray | None = None,
) -> np.ndarray:
    """Scores (Q, n) of every query against every item, in the metric's own units. Cosine galleries without
    a ``kernel`` never wait for the numba kernel to compile (``_ready_kernel``).

    ``item_norms`` (cosine only): ``row_norms(items)`` computed once beforehand (a gallery keeps them per
    state, see ``GallerySearcher``); without it they are computed here, a numpy pass ~10x the dot kernel's.
    Either way the floats are the same: a norm depends only on its own row.

    Every metric sums in a fixed order (``LANES``), so an item's score never depends on which block, shard
    or CPU computed it."""
    if metric == "order_violation":
        return (kernel or get_kernel()).order_violation(queries, items, query_side)
    dot = (kernel or _ready_kernel()).dot
    if metric == "negative_cosine":
        return -dot(queries, items)
    if metric == "cosine":
        norms = row_norms(items) if item_norms is None else item_norms
        if norms.shape != (items.shape[0],):
            raise ValueError(f"item_norms has shape {norms.shape}, expected ({items.shape[0]},)")
        return _divide(dot(unit_queries(queries), items), norms)
    raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")


def unit_queries(queries: np.ndarray) -> np.ndarray:
    """Queries divided by their canonical norms (a zero query gives NaN rows, zeroed by ``_divide``)."""
    q = np.asarray(queries, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return q / row_norms(q)[:, None]


def _divide(dots: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """``nan_to_num(dots / norms, nan=0)`` in place on the (Q, n) scores the dot kernel returned: one pass
    over Q x n floats, against the kernel's Q x n x D, so it costs nothing next to the scan (measured in
    ``benchmarks/retrieval.py``). A zero-norm item scores 0 (0/0 -> NaN -> 0) as before; the clamp of
    +-inf to the float32 extremes is ``nan_to_num``'s, also as before."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(dots, norms[None, :], out=dots)
    return np.nan_to_num(dots, copy=False, nan=0.0)


@dataclass
class TopK:
    """Best-first results per query; rows may be shorter than k when fewer items exist."""

    positions: list[np.ndarray]  # per query: int64 gallery positions
    scores: list[np.ndarray]  # per query: float32 scores in the metric's units
    metric: str


def top_k(
    queries: np.ndarray,
    items: np.ndarray,
    k: int,
    *,
    metric: str,
    query_side: Side = "caption",
    valid: np.ndarray | None = None,
    kernel: Kernel | None = None,
    block_rows: int | None = None,
    item_norms: np.ndarray | None = None,
) -> TopK:
    """Exact top-k of ``items`` (N, D), possibly a memory map, for each query (Q, D).

    Args:
        metric: ``order_violation`` / ``negative_cosine`` (lower is better) or ``cosine`` (higher is better).
        query_side: for order violation, whether the queries are captions (E(query, item)) or images
            (E(item, query)).
        valid: optional (N,) bool mask; False rows (deleted items) are never returned.
        block_rows: gallery rows per block (default: ~32 MiB of vectors); memory is O(Q * block_rows).
        item_norms: for cosine, optional (N,) ``row_norms(items)`` computed once (see ``score_block``);
            without them every search recomputes them block by block.

    Returns:
        ``TopK`` with ties broken by ascending position.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    n_items, dim = items.shape
    if metric == "order_violation":
        kernel = kernel or get_kernel()
        if isinstance(kernel, PrunedKernel) and n_items and q.shape[0]:
            positions, found = kernel.prune_top_k(q, items, k, query_side, valid)
            return TopK(positions, found, metric)
    if item_norms is not None and (metric != "cosine" or item_norms.shape != (n_items,)):
        raise ValueError(f"item_norms of shape {item_norms.shape} for {metric} over {n_items} items")
    rows = block_rows or max(256, _BLOCK_FLOATS // max(dim, 1))  # memory: the block plus Q x rows scores
    sign = np.float32(-1.0 if METRICS[metric]["direction"] == "higher_is_better" else 1.0)
    best_keys = np.full((q.shape[0], 0), np.inf, dtype=np.float32)
    best_pos = np.zeros((q.shape[0], 0), dtype=np.int64)

    def scores(start: int) -> np.ndarray:
        block = items[start : start + rows]
        norms = None if item_norms is None else item_norms[start : start + rows]
        return score_block(q, block, metric, query_side=query_side, kernel=kernel, item_norms=norms).astype(
            np.float32, copy=False
        )

    starts = range(0, n_items, rows)
    ahead = _prefetch_pool().submit(scores, starts[0]) if len(starts) > 1 else None
    for i, start in enumerate(starts):  # block i + 1 is scored while block i is merged
        if ahead is None:
            keys = scores(start)
        else:
            keys = ahead.result()
            ahead = _prefetch_pool().submit(scores, starts[i + 1]) if i + 1 < len(starts) else None
        block_len = keys.shape[1]
        if sign != 1:
            keys *= sign  # selection always keeps the smallest keys
        if valid is not None:
            keys[:, ~valid[start : start + block_len]] = np.inf
        best_keys, best_pos = _merge(best_keys, best_pos, keys, start, k)
    out_pos, out_scores = [], []
    for keys_row, pos_row in zip(best_keys, best_pos, strict=True):
        keep = np.isfinite(keys_row)
        out_pos.append(pos_row[keep])
        out_scores.append(keys_row[keep] * sign)
    return TopK(out_pos, out_scores, metric)


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _prefetch_pool() -> ThreadPoolExecutor:
    """Threads that score a search's next block while the caller merges the current one (the merge is
    serial numpy; without the overlap the kernel's cores idle through it, ~15% of a 32-query scan)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(2, os.cpu_count() or 1), thread_name_prefix="lnserve-topk")
        return _pool


def _merge(
    best_keys: np.ndarray, best_pos: np.ndarray, keys: np.ndarray, offset: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Keep the k smallest (key, position) pairs of the running best plus this block, stably."""
    n_queries, n = keys.shape
    if best_keys.shape[1] == k:  # k found already: only keys below a query's k-th best can enter
        below = keys < best_keys[:, -1:]  # an equal key comes later, so it loses the tie
        counts = below.sum(axis=1)
        width = int(counts.max())
        if width == 0:
            return best_keys, best_pos
        rows, cols = np.nonzero(below)  # row-major: each row's columns ascend
        slot = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        cand_keys = np.full((n_queries, width), np.inf, dtype=np.float32)  # padding sorts last
        cand_pos = np.zeros((n_queries, width), dtype=np.int64)
        cand_keys[rows, slot] = keys[rows, cols]
        cand_pos[rows, slot] = cols + offset
    elif n > k:
        kth = np.partition(keys, k - 1, axis=1)[:, k - 1 : k]
        mask = keys <= kth
        if (mask.sum(axis=1) == k).all():  # common case, no ties at the boundary: fully vectorised
            rows, cols = np.nonzero(mask)  # row-major, so each row's columns come in ascending order
            cand_keys = keys[rows, cols].reshape(n_queries, k)
            cand_pos = (cols + offset).reshape(n_queries, k)
        else:  # ties at the k-th value: keep every tied candidate, the stable sort below decides
            return _merge_rows(best_keys, best_pos, keys, mask, offset, k)
    else:
        cand_keys = keys
        cand_pos = np.broadcast_to(np.arange(offset, offset + n), keys.shape)
    all_keys = np.concatenate([best_keys, cand_keys], axis=1)  # positions ascend left to right
    all_pos = np.concatenate([best_pos, cand_pos], axis=1)
    order = np.argsort(all_keys, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(all_keys, order, 1), np.take_along_axis(all_pos, order, 1)


def _merge_rows(
    best_keys: np.ndarray, best_pos: np.ndarray, keys: np.ndarray, mask: np.ndarray, offset: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    n_queries = keys.shape[0]
    width = min(k, best_keys.shape[1] + keys.shape[1])
    out_keys = np.full((n_queries, width), np.inf, dtype=np.float32)
    out_pos = np.zeros((n_queries, width), dtype=np.int64)
    for r in range(n_queries):
        cols = np.flatnonzero(mask[r])
        row_keys = np.concatenate([best_keys[r], keys[r, cols]])
        row_pos = np.concatenate([best_pos[r], cols + offset])
        order = np.argsort(row_keys, kind="stable")[:width]
        out_keys[r], out_pos[r] = row_keys[order], row_pos[order]
    return out_keys, out_pos
