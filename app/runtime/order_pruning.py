"""Exact order-violation top-k that skips work: a bound-pruned scan, bit-identical to the full scan.

``E(c, i) = sum_d max(0, c_d - i_d)^2`` is a sum of non-negative terms, so a partial sum over some dims never
exceeds the whole. Per query the scan visits the 16-dim blocks (one cache line each, and exactly the canonical
kernel's lane vectors) in the order that grows partial sums fastest, measured on a strided sample of the
gallery; an item is dropped as soon as its partial sum is above the query's current k-th best score by more
than any float rounding could account for (``_margin``). An item that survives every block is scored again
in the canonical order (``numba_kernel``: 16 lanes, folded pairwise) and enters the running top-k by
(score, position), the full scan's tie rule. Only canonical scores are ever returned or compared as the k-th
best, so ids and scores equal the full scan's bit for bit; the pruning order changes only how much is read.

The k-th best starts from the sample: the k-th canonical score among sampled (valid, finite) rows bounds the
gallery's k-th best from above, so pruning starts at the first row.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import numba_kernel
from .numba_kernel import float32_data

LANES = 16
SAMPLE_ROWS = 512  # rows measured per search for the block order and the first k-th best
TILE_ROWS = 64  # rows scored against every query while they sit in L2 (256 KiB at dim 1024)


def _margin(dim: int) -> tuple[float, float]:
    """(relative, absolute) slack: a float32 sum of ``dim + 1`` roundings in any order is within
    ``gamma = n u / (1 - n u)`` of the exact sum (u = 2^-24; 2^-23 is used for headroom), and squares that
    underflow are off by at most 2^-149 each. Pruning needs ``partial > kth * rel + abs``."""
    n = dim + 2
    gamma = n * 2.0**-23 / (1 - n * 2.0**-23)
    return (1 + gamma) / (1 - gamma), n * 2.0**-140


@intrinsic
def _index_data(typingctx, arr):
    """The int64 data pointer of a C-contiguous array."""

    def codegen(context, builder, sig, args):
        return context.make_array(sig.args[0])(context, builder, args[0]).data

    return types.CPointer(types.int64)(arr), codegen


@njit(nogil=True, cache=True)
def _canonical(q, items, row, caption):  # pragma: no cover - compiled
    """The canonical score of ``items[row]`` (``numba_kernel``'s order: lane l sums dims l, l + 16, ...,
    the tail dims go to lanes 0.., lanes folded l + 8, l + 4, l + 2, l + 1); no fastmath, so no
    reassociation and no contraction."""
    dim = q.shape[0]
    acc = np.zeros(LANES, dtype=np.float32)
    full = dim // LANES * LANES
    for d in range(full):
        x = q[d] - items[row, d] if caption else items[row, d] - q[d]
        if x < 0:
            x = np.float32(0.0)
        acc[d % LANES] += x * x
    for d in range(full, dim):
        x = q[d] - items[row, d] if caption else items[row, d] - q[d]
        if x < 0:
            x = np.float32(0.0)
        acc[d - full] += x * x
    width = 8
    while width >= 1:
        for lane in range(width):
            acc[lane] = acc[lane] + acc[lane + width]
        width //= 2
    return acc[0]


@njit(nogil=True, cache=True)
def _insert(keys, pos, score, p):  # pragma: no cover - compiled
    """Insert (score, p) into the sorted top-k arrays if it beats the last entry by (score, position)."""
    k = keys.shape[0]
    if not (score < keys[k - 1] or (score == keys[k - 1] and p < pos[k - 1])):
        return
    i = k - 1
    while i > 0 and (score < keys[i - 1] or (score == keys[i - 1] and p < pos[i - 1])):
        keys[i] = keys[i - 1]
        pos[i] = pos[i - 1]
        i -= 1
    keys[i] = score
    pos[i] = p


def _span_sum(caption: bool):
    """An intrinsic summing the terms of blocks ``order[b0:b1]`` (16 dims each) as one ``<16 x float>``
    accumulator folded once at the end (any order will do: it is only ever a bound). ``caption``:
    ``max(0, q - v)^2``, else ``max(0, v - q)^2``."""

    def codegen(context, builder, sig, args):
        qp, qoff, vp, voff, op, b0, b1 = args
        vec = ir.VectorType(ir.FloatType(), LANES)
        zero = ir.Constant(vec, None)
        accs = [cgutils.alloca_once_value(builder, zero) for _ in range(2)]  # two chains: fadd latency

        def load(base, off):
            return builder.load(builder.bitcast(builder.gep(base, [off]), vec.as_pointer()), align=4)

        def add_block(b, acc):
            width = ir.Constant(b0.type, LANES)
            col = builder.mul(builder.load(builder.gep(op, [b])), width)
            q, v = load(qp, builder.add(qoff, col)), load(vp, builder.add(voff, col))
            x = builder.fsub(q, v) if caption else builder.fsub(v, q)
            x = builder.select(builder.fcmp_ordered("<", x, zero), zero, x)
            builder.store(builder.fadd(builder.load(acc), builder.fmul(x, x)), acc)

        count = builder.sub(b1, b0)
        pairs = builder.ashr(count, ir.Constant(b0.type, 1))
        with cgutils.for_range(builder, pairs) as loop:
            first = builder.add(b0, builder.shl(loop.index, ir.Constant(b0.type, 1)))
            add_block(first, accs[0])
            add_block(builder.add(first, ir.Constant(b0.type, 1)), accs[1])
        odd = builder.icmp_signed("!=", builder.and_(count, ir.Constant(b0.type, 1)), ir.Constant(b0.type, 0))
        with builder.if_then(odd):
            add_block(builder.sub(b1, ir.Constant(b0.type, 1)), accs[0])
        x = builder.fadd(builder.load(accs[0]), builder.load(accs[1]))
        for width in (8, 4, 2, 1):
            lo = ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width)))
            hi = ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width, 2 * width)))
            x = builder.fadd(builder.shuffle_vector(x, x, lo), builder.shuffle_vector(x, x, hi))
        return builder.extract_element(x, ir.Constant(ir.IntType(32), 0))

    def typer(typingctx, qp, qoff, vp, voff, op, b0, b1):
        return types.float32(qp, qoff, vp, voff, op, b0, b1), codegen

    typer.__name__ = f"order_span_{'caption' if caption else 'image'}"
    return intrinsic(typer)


_span_caption, _span_image = _span_sum(True), _span_sum(False)


@njit(nogil=True, cache=True)
def _blocks_read(qp, qoff, vp, voff, order, limit, caption):  # pragma: no cover - compiled
    """Adds the blocks' terms in ``order``, a few at a time (up to 4: fewer folds and compares, a little
    less pruning; 1 below 32 blocks), until the partial sum passes ``limit``; returns the blocks read and
    whether the row was dropped."""
    partial = np.float32(0.0)
    n_blocks = order.shape[0]
    op = _index_data(order)
    step = max(1, min(4, n_blocks // 16))
    b = 0
    while b < n_blocks:
        end = min(n_blocks, b + step)
        if caption:
            partial += _span_caption(qp, qoff, vp, voff, op, b, end)
        else:
            partial += _span_image(qp, qoff, vp, voff, op, b, end)
        b = end
        if partial > limit and partial < np.inf:
            return b, True
    return n_blocks, False


@njit(nogil=True, cache=True)
def _scan(
    queries, items, valid, orders, seed, start, stop, caption, rel, absolute, keys, pos, visited
):  # pragma: no cover - compiled
    """Rows ``start:stop``: per query, prune on the block order ``orders[qi]``; fill ``keys``/``pos``
    (Q, k), sorted by (score, position); ``visited[qi]`` counts the blocks read. No fastmath here: the
    canonical scores must keep their order."""
    n_queries, dim = queries.shape
    k = keys.shape[1]
    qp = float32_data(queries)
    vp = float32_data(items)
    for t0 in range(start, stop, TILE_ROWS):
        t1 = min(stop, t0 + TILE_ROWS)
        for qi in range(n_queries):
            q = queries[qi]
            order = orders[qi]
            for row in range(t0, t1):
                if not valid[row]:
                    continue
                limit = min(seed[qi], keys[qi, k - 1]) * rel + absolute
                read, dropped = _blocks_read(qp, qi * dim, vp, row * dim, order, limit, caption)
                visited[qi] += read
                if dropped:
                    continue
                score = _canonical(q, items, row, caption)
                if np.isfinite(score):
                    _insert(keys[qi], pos[qi], score, row)


def _block_orders(queries: np.ndarray, sample: np.ndarray, caption: bool) -> np.ndarray:
    """Per query, the full 16-dim blocks by their mean term on the sample, largest first."""
    blocks = queries.shape[1] // LANES
    orders = np.empty((queries.shape[0], blocks), dtype=np.int64)
    for qi, q in enumerate(queries):
        with np.errstate(all="ignore"):  # crafted values may overflow: they only change the visiting order
            diff = (q - sample) if caption else (sample - q)
            np.maximum(diff, 0, out=diff)
            mean = np.einsum("ij,ij->j", diff, diff)[: blocks * LANES].reshape(blocks, LANES).sum(axis=1)
        orders[qi] = np.argsort(-np.nan_to_num(mean, nan=0.0), kind="stable")
    return orders


class PrunedSearch:
    """Runs pruned top-k searches on a small thread pool (rows split into contiguous runs; each run keeps
    its own top-k, merged by (score, position), so the split never changes the result)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self.last_visited_fraction = float("nan")  # of the last search in any thread: for benchmarks

    def warm(self) -> None:
        """Compile every variant a search calls (both sides, writable and read-only galleries) off the
        request path; numba's disk cache makes this quick after the first process."""
        items = np.zeros((4, 2 * LANES + 1), dtype=np.float32)
        frozen = items.copy()
        frozen.flags.writeable = False
        for rows in (items, frozen):
            for caption in (True, False):
                self.top_k(items[:1], rows, 2, caption, None)

    def top_k(
        self, queries: np.ndarray, items: np.ndarray, k: int, caption: bool, valid: np.ndarray | None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        q = np.ascontiguousarray(queries, dtype=np.float32)
        n, dim = items.shape
        n_queries = q.shape[0]
        ok = np.ones(n, dtype=np.bool_) if valid is None else np.ascontiguousarray(valid, dtype=np.bool_)
        step = max(1, n // SAMPLE_ROWS)
        rows = np.arange(0, n, step)[:SAMPLE_ROWS]
        sample = np.asarray(items[rows], dtype=np.float32)
        orders = _block_orders(q, sample, caption)
        seed = np.full(n_queries, np.inf, dtype=np.float32)
        sampled = np.flatnonzero(ok[rows])  # sample positions of valid rows
        if len(sampled) >= k:  # the k-th best of a subset bounds the gallery's k-th best from above
            scores = np.empty((n_queries, len(sampled)), dtype=np.float32)
            part = np.ascontiguousarray(sample[sampled])
            numba_kernel.scan(
                q,
                part,
                scores,
                0,
                len(sampled),
                numba_kernel.tile_rows(dim),
                numba_kernel.CAPTION if caption else numba_kernel.IMAGE,
            )
            for qi in range(n_queries):
                finite = scores[qi][np.isfinite(scores[qi])]
                if len(finite) >= k:
                    seed[qi] = np.partition(finite, k - 1)[k - 1]
        rel, absolute = _margin(dim)
        runs = min(self.threads, max(1, n // (4 * TILE_ROWS)))
        per = -(-n // runs)
        bounds = [(s, min(n, s + per)) for s in range(0, n, per)] if n else []

        def run(a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            keys = np.full((n_queries, k), np.inf, dtype=np.float32)
            pos = np.full((n_queries, k), np.iinfo(np.int64).max, dtype=np.int64)
            visited = np.zeros(n_queries, dtype=np.int64)
            _scan(
                q,
                items,
                ok,
                orders,
                seed,
                a,
                b,
                caption,
                rel,
                absolute,
                keys,
                pos,
                visited,
            )
            return keys, pos, visited

        if len(bounds) > 1:
            with self._pool_lock:  # concurrent searches share one pool
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="lnserve-pruned")
            results = [f.result() for f in [self._pool.submit(run, a, b) for a, b in bounds]]
        else:
            results = [run(a, b) for a, b in bounds]
        blocks = dim // LANES
        total = sum(int(r[2].sum()) for r in results)
        self.last_visited_fraction = total / max(1, n * n_queries * blocks) if blocks else math.nan
        out_pos, out_scores = [], []
        for qi in range(n_queries):
            keys = np.concatenate([r[0][qi] for r in results]) if results else np.empty(0, np.float32)
            pos = np.concatenate([r[1][qi] for r in results]) if results else np.empty(0, np.int64)
            order = np.lexsort((pos, keys))[:k]
            keys, pos = keys[order], pos[order]
            finite = np.isfinite(keys)
            out_pos.append(pos[finite])
            out_scores.append(keys[finite])
        return out_pos, out_scores
