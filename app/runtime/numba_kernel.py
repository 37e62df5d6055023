"""The order-violation scan as a hand-tiled numba kernel: explicit 16-lane LLVM vectors, blocked over queries
and gallery rows.

Why LLVM IR and not plain numba loops: the float order of each score is fixed (see ``LANES`` below) and
LLVM may not reassociate float adds, so a scalar loop stays scalar; written as ``<16 x float>`` vectors the
same arithmetic runs at full SIMD width on any CPU (AVX-512, 2 x AVX2, 4 x NEON), with identical floats.
No C compiler is needed at run time (numba JITs through llvmlite), so the Docker image runs it too.

Summation order (the canonical one; ``NumpyKernel`` reproduces it exactly): lane ``l`` of a 16-float
accumulator sums ``max(0, c_d - i_d)^2`` over ``d = l, l + 16, l + 32, ...`` in increasing ``d`` (the last
``dim % 16`` dims go to lanes ``0 .. dim % 16 - 1``), then lanes are folded pairwise ``l + 8``, ``l + 4``,
``l + 2``, ``l + 1``. This is the order torch.compile's kernel used on AVX-512 hosts, so scores are
bit-identical to it. The square and the add are never fused (an FMA there would round differently); the
subtraction ``a - b`` is computed as ``fma(a, 1, -b)``, which rounds exactly like it (``a * 1`` is exact)
but runs on the multiply pipes, so sub, max, mul and add spread over both pipe pairs of a core (measured
+28% in-cache rate on the AVX-512 dev VM; with AVX2 code the plain subtraction measured ~4% faster, so
``BLOCK_SHAPES`` picks it per vector width).

Blocking: a thread walks its gallery rows in tiles of ~256 KiB (L2); within a tile, blocks of
``QUERY_BLOCK`` queries x ``ROW_BLOCK`` rows (per vector width, ``BLOCK_SHAPES``: 4 x 4 with AVX-512, 2 x 2
with AVX2) keep their accumulators in registers, so each loaded vector feeds several pairs. One query is
bound by memory bandwidth; a batch by the ALUs (4 vector ops per element and pair). The block shape and the
subtraction's form never change a float: each pair's 16 lanes sum in the canonical order whatever the block.
"""

from __future__ import annotations

from types import FunctionType
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.extending import intrinsic

LANES = 16
_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_VEC = ir.VectorType(_F32, LANES)
_ONE = np.float32(1.0)


@intrinsic
def float32_data(typingctx, arr):
    """The float32 data pointer of a C-contiguous array (pointer indexing skips negative-index checks)."""

    def codegen(context, builder, sig, args):
        return context.make_array(sig.args[0])(context, builder, args[0]).data

    return types.CPointer(types.float32)(arr), codegen


def _const(n: int) -> ir.Constant:
    return ir.Constant(_I64, n)


def _lanes(builder: ir.IRBuilder, v: ir.Value, first: int, count: int) -> ir.Value:
    """Lanes ``first .. first + count - 1`` of ``v`` as a shorter vector."""
    mask = ir.Constant(ir.VectorType(_I32, count), list(range(first, first + count)))
    return builder.shuffle_vector(v, v, mask)


def _block(n_queries: int, n_rows: int, mode: str, fma_sub: bool = True):
    """An intrinsic scoring ``n_queries`` x ``n_rows`` pairs; ``mode``: ``caption`` E(query, row), ``image``
    E(row, query), ``dot`` the dot product query . row (cosine galleries), all in the same lane order.

    Arguments: query pointer and element offset, row pointer and offset, dim, output pointer, offset of
    the block's first score and the output row stride (gallery rows per query).
    """

    def codegen(context, builder, sig, args):
        qp, qoff, vp, voff, dim, op, ooff, ostride, one = args  # one: 1.0, see ``scan``
        zero = ir.Constant(_VEC, None)
        ones = builder.shuffle_vector(
            builder.insert_element(ir.Constant(_VEC, None), one, ir.Constant(_I32, 0)),
            ir.Constant(_VEC, None),
            ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES),
        )
        accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(n_rows)] for _ in range(n_queries)]

        def at(base, off, row, col):
            return builder.gep(base, [builder.add(off, builder.add(builder.mul(_const(row), dim), col))])

        def load(base, off, row, col, vector):
            ptr = at(base, off, row, col)
            return (
                builder.load(builder.bitcast(ptr, _VEC.as_pointer()), align=4)
                if vector
                else builder.load(ptr)
            )

        caption = mode == "caption"

        def term(q, v):
            if mode == "dot":  # a plain product: the add below is never fused with it
                return builder.fmul(q, v)
            if fma_sub and isinstance(q.type, ir.VectorType):  # a - b as fma(a, 1, -b): same rounding
                fma = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(_VEC, [_VEC, _VEC, _VEC]), "llvm.fma.v16f32"
                )
                a, b = (q, v) if caption else (v, q)
                x = builder.call(fma, [a, ones, builder.fneg(b)])
            else:
                x = builder.fsub(q, v) if caption else builder.fsub(v, q)
            zeros = ir.Constant(x.type, None)
            clamped = builder.select(builder.fcmp_ordered("<", x, zeros), zeros, x)  # NaN stays NaN
            return builder.fmul(clamped, clamped)

        full = builder.ashr(dim, _const(4))
        with cgutils.for_range(builder, full) as loop:  # dims 16 k .. 16 k + 15 -> lanes 0 .. 15
            col = builder.mul(loop.index, _const(LANES))
            qv = [load(qp, qoff, a, col, True) for a in range(n_queries)]
            vv = [load(vp, voff, b, col, True) for b in range(n_rows)]
            for a in range(n_queries):
                for b in range(n_rows):
                    builder.store(builder.fadd(builder.load(accs[a][b]), term(qv[a], vv[b])), accs[a][b])
        done = builder.mul(full, _const(LANES))
        with cgutils.for_range(builder, builder.sub(dim, done)) as loop:  # tail dim done + l -> lane l
            col = builder.add(done, loop.index)
            for a in range(n_queries):
                q = load(qp, qoff, a, col, False)
                for b in range(n_rows):
                    acc = builder.load(accs[a][b])
                    lane = builder.extract_element(acc, loop.index)
                    lane = builder.fadd(lane, term(q, load(vp, voff, b, col, False)))
                    builder.store(builder.insert_element(acc, lane, loop.index), accs[a][b])
        for a in range(n_queries):
            for b in range(n_rows):
                v = builder.load(accs[a][b])
                for width in (8, 4, 2, 1):  # lane l += lane l + width
                    v = builder.fadd(_lanes(builder, v, 0, width), _lanes(builder, v, width, width))
                score = builder.fadd(ir.Constant(_F32, 0.0), builder.extract_element(v, ir.Constant(_I32, 0)))
                dst = builder.add(ooff, builder.add(builder.mul(_const(a), ostride), _const(b)))
                builder.store(score, builder.gep(op, [dst]))
        return context.get_dummy_value()

    def typer(typingctx, qp, qoff, vp, voff, dim, op, ooff, ostride, one):
        return types.void(qp, qoff, vp, voff, dim, op, ooff, ostride, one), codegen

    typer.__name__ = f"scan_{mode}_{n_queries}x{n_rows}"
    return intrinsic(typer)


CAPTION, IMAGE, DOT = 0, 1, 2  # ``scan``'s mode argument
FEW_QUERIES = 4  # fewer queries than this are memory-bound: scored row after row, not in blocks


def _by_mode(n_queries: int, n_rows: int, fma_sub: bool = True):
    """One inlined function that runs the ``n_queries`` x ``n_rows`` block of ``scan``'s mode."""
    caption, image, dot = (_block(n_queries, n_rows, m, fma_sub) for m in ("caption", "image", "dot"))

    @njit(inline="always")
    def run(mode, qp, qo, vp, vo, dim, op, oo, n, one):  # pragma: no cover - compiled
        if mode == CAPTION:
            caption(qp, qo, vp, vo, dim, op, oo, n, one)
        elif mode == IMAGE:
            image(qp, qo, vp, vo, dim, op, oo, n, one)
        else:
            dot(qp, qo, vp, vo, dim, op, oo, n, one)

    return run


def _shape_globals(query_block: int, row_block: int, fma_sub: bool = True) -> dict[str, object]:
    """The names ``_scan_py`` reads for one block shape (numba freezes them at compile time)."""
    return {
        "QUERY_BLOCK": query_block,
        "ROW_BLOCK": row_block,
        "_full": _by_mode(query_block, row_block, fma_sub),
        "_rows1": _by_mode(query_block, 1, fma_sub),
        "_query1": _by_mode(1, row_block, fma_sub),
        "_one": _by_mode(1, 1, fma_sub),
    }


def _scan_py(queries, items, out, start, stop, tile, mode, one):
    """Scores rows ``start:stop`` of ``items`` (n, D) against ``queries`` (Q, D) into ``out`` (Q, n).

    All three arrays are C-contiguous float32; ``mode`` is ``CAPTION``, ``IMAGE`` or ``DOT``; ``one`` is
    1.0. With a few queries the rows are read in order, one at a time (row blocks would interleave four
    4 KiB streams: 19.6 vs 31 GB/s on one core); otherwise they are walked in tiles of ``tile``, each scored
    against every query block while it sits in L2.
    """
    n_queries, dim = queries.shape
    n = out.shape[1]
    qp = float32_data(queries)
    vp = float32_data(items)
    op = float32_data(out)
    if n_queries < FEW_QUERIES:  # memory-bound: one row after another keeps the prefetchers streaming
        for j in range(start, stop):
            for qi in range(n_queries):
                _one(mode, qp, qi * dim, vp, j * dim, dim, op, qi * n + j, n, one)
        return
    for t0 in range(start, stop, tile):
        t1 = min(stop, t0 + tile)
        qi = 0
        while qi < n_queries:
            block = qi + QUERY_BLOCK <= n_queries
            j = t0
            while j + ROW_BLOCK <= t1:
                if block:
                    _full(mode, qp, qi * dim, vp, j * dim, dim, op, qi * n + j, n, one)
                else:
                    _query1(mode, qp, qi * dim, vp, j * dim, dim, op, qi * n + j, n, one)
                j += ROW_BLOCK
            while j < t1:
                if block:
                    _rows1(mode, qp, qi * dim, vp, j * dim, dim, op, qi * n + j, n, one)
                else:
                    _one(mode, qp, qi * dim, vp, j * dim, dim, op, qi * n + j, n, one)
                j += 1
            qi += QUERY_BLOCK if block else 1


def vector_isa() -> str:
    """The widest vector registers numba's LLVM target may use: ``avx512`` (16 floats), ``avx2`` (8) or
    ``other``; follows ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` like numba does."""
    features: str | None = getattr(config, "CPU_FEATURES", None)  # set at run time from the environment
    if features is None:
        features = llvm.get_host_cpu_features().flatten()
    enabled = set(f[1:] for f in features.split(",") if f.startswith("+"))
    return "avx512" if "avx512f" in enabled else "avx2" if "avx2" in enabled else "other"


BLOCK_SHAPES = {"avx512": (4, 4, True), "avx2": (2, 2, False), "other": (4, 4, True)}
"""Per vector width (``vector_isa``): queries x rows per register block, and whether ``a - b`` is computed
as ``fma(a, 1, -b)``. Every pair has its own accumulator in the canonical order and both subtractions round
alike, so these change only the speed, never a float (tested). AVX-512: 4 x 4 blocks of one zmm accumulator
each fit 32 registers. AVX2: a 16-lane accumulator takes 2 of 16 ymm registers, so 4 x 4 spills; 2 x 2 and
a plain subtraction measured +15% (order violation) and +19% (dot) in-cache on an AMD EPYC (Zen 4) compiled
for AVX2 (``benchmarks/retrieval.py`` prints the variants' rates on the host it runs on)."""
ISA = vector_isa()
QUERY_BLOCK, ROW_BLOCK, FMA_SUB = BLOCK_SHAPES[ISA]
_HOST = _shape_globals(QUERY_BLOCK, ROW_BLOCK, FMA_SUB)
_full, _rows1, _query1, _one = _HOST["_full"], _HOST["_rows1"], _HOST["_query1"], _HOST["_one"]


def build_scan(query_block: int, row_block: int, fma_sub: bool = True) -> Any:
    """``_scan_py`` compiled (uncached) for another block shape, or with a plain ``a - b`` instead of the
    fma trick: the variants the tests and the benchmark compare (same floats, other speed)."""
    names = _shape_globals(query_block, row_block, fma_sub)
    fn = FunctionType(_scan_py.__code__, {**_scan_py.__globals__, **names})
    return njit(nogil=True)(fn)


try:  # cache compiled code next to this file or in the user's cache; a read-only install just recompiles
    _scan = njit(nogil=True, cache=True)(_scan_py)
except RuntimeError:  # numba finds no writable cache location
    _scan = njit(nogil=True)(_scan_py)


def scan(
    queries: np.ndarray, items: np.ndarray, out: np.ndarray, start: int, stop: int, tile: int, mode: int
) -> None:
    """Scores rows ``start:stop`` of ``items`` into ``out`` (see ``_scan_py``); releases the GIL.

    The 1.0 goes in at run time so LLVM cannot fold ``fma(a, 1, -b)`` back into a subtraction."""
    _scan(queries, items, out, start, stop, tile, mode, _ONE)


def tile_rows(dim: int) -> int:
    """Gallery rows per tile: ~256 KiB, a multiple of 4 (every ``ROW_BLOCK``'s tail is scored row by row)."""
    return max(4, ((1 << 16) // max(dim, 1)) // 4 * 4)


def warm() -> None:
    """Compile every variant the service calls (writable and read-only galleries), off the request path."""
    q = np.zeros((1, LANES + 1), dtype=np.float32)
    out = np.empty((1, 2), dtype=np.float32)
    items = np.zeros((2, LANES + 1), dtype=np.float32)
    frozen = items.copy()
    frozen.flags.writeable = False
    for rows in (items, frozen):
        for mode in (CAPTION, IMAGE, DOT):
            scan(q, rows, out, 0, 2, tile_rows(LANES + 1), mode)
