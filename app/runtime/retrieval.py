"""Exact brute-force top-k for order violation, negative cosine and cosine, with bounded memory.

No ANN index supports order violation, so retrieval is a chunked scan: each block of gallery rows is scored
against all queries, the block's best k per query are picked by partial selection (``np.partition``, no full
sort) and merged with the running best. Ties are broken by gallery position (insertion order), so results
are deterministic.

Two kernels compute the order violation ``E(c, v) = sum_k max(0, c_k - v_k)^2``:

* ``numpy``: per query, subtract / clamp / squared-sum in an L2-sized scratch buffer (always available); the
  chunks are spread over one thread per core (numpy releases the GIL), which halves latency on 2 cores;
* ``compiled``: the same expression fused into one vectorised loop by ``torch.compile`` (needs a C compiler;
  the first call compiles for ~20 s, later processes reuse inductor's on-disk cache). It scans at memory
  bandwidth for one query. Gallery rows are the outer loop and queries the inner one, so a batch reads each
  row from memory once (queries-outer re-streamed the 32 MiB block per query: 32 queries cost 6.8 x one).
  A batch is then bound by the single-accumulator reduction inductor emits (~4.8 x one query at 1M items);
  splitting the accumulator changes the floats, so it is not done.

Both kernels give bit-identical scores to their previous versions (same per-pair arithmetic).

Not done, measured: lower-bound pruning (score only the m dims where the query is largest, fully score only
items whose partial score can still beat the running k-th best). On the benchmark's random non-negative unit
vectors (dim 1024, 100k items) it pruned nothing for m <= 128; m = 384 pruned ~97% of items for caption
queries but none for image queries, at a third of the full cost plus a column gather. It is data-dependent and
never cheaper than the worst case here, so the scan stays exhaustive.

The ``scorer`` setting (``LNSERVE_SCORER``) picks one (``auto`` = compiled when a C compiler is present, else
numpy); a compiled kernel that fails to build falls back to numpy with a warning.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from lnserve.app.runtime.scoring import negative_cosine

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
SCORERS = ("auto", "compiled", "numpy")
_BLOCK_FLOATS = 1 << 23  # gallery floats scored per block (32 MiB of float32) before top-k selection


def metric_for(method: str, family: str) -> Metric:
    """The model's own score: order models -> order violation, symmetric -> negative cosine, skip-thoughts ->
    cosine."""
    if family == "skip-thoughts":
        return "cosine"
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


class NumpyKernel:
    """Per query: three in-cache passes over an L2-sized scratch buffer; no (Q, n, D) temporary.

    The chunks are split into one contiguous run per CPU core (numpy releases the GIL in ufuncs and einsum),
    each thread with its own scratch; chunk boundaries do not depend on the split, so the floats are identical
    to a single-threaded scan."""

    name = "numpy"

    def __init__(self, threads: int | None = None) -> None:
        self.threads = max(1, threads or min(8, os.cpu_count() or 1))
        self._pool: ThreadPoolExecutor | None = None

    def order_violation(self, queries: np.ndarray, items: np.ndarray, query_side: Side) -> np.ndarray:
        n, dim = items.shape
        rows = max(8, (1 << 17) // max(dim, 1))  # ~512 KiB scratch: stays in L2
        out = np.empty((queries.shape[0], n), dtype=np.float32)
        starts = list(range(0, n, rows))
        runs = min(self.threads, len(starts))
        if runs <= 1:
            self._scan(queries, items, query_side, starts, rows, out)
            return out
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="lnserve-scan")
        per = -(-len(starts) // runs)
        futures = [
            self._pool.submit(self._scan, queries, items, query_side, starts[i : i + per], rows, out)
            for i in range(0, len(starts), per)
        ]
        for f in futures:
            f.result()
        return out

    @staticmethod
    def _scan(
        queries: np.ndarray, items: np.ndarray, side: Side, starts: list[int], rows: int, out: np.ndarray
    ) -> None:
        buf = np.empty((min(rows, items.shape[0]), items.shape[1]), dtype=np.float32)
        for start in starts:
            chunk = items[start : start + rows]
            b = buf[: chunk.shape[0]]
            for qi, q in enumerate(queries):
                if side == "caption":
                    np.subtract(q, chunk, out=b)
                else:
                    np.subtract(chunk, q, out=b)
                np.maximum(b, np.float32(0), out=b)
                out[qi, start : start + chunk.shape[0]] = np.einsum("ij,ij->i", b, b)


class CompiledKernel:
    """``torch.compile`` fuses subtract, clamp, square and sum into one loop over the gallery block."""

    name = "compiled"

    def __init__(self) -> None:
        import torch

        # (n, Q) output, gallery rows outer and queries inner: each gallery row is read from memory once and
        # scored against every query while it sits in L1 (queries-outer re-streamed the block per query, so a
        # batch of 32 cost ~6.5 x one query). The per-pair loop over D is unchanged: identical floats.
        def caption_side(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return (q[None, :, :] - v[:, None, :]).clamp_min(0).square().sum(-1)

        def image_side(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return (v[:, None, :] - q[None, :, :]).clamp_min(0).square().sum(-1)

        self._torch = torch
        self._fns = {
            "caption": torch.compile(caption_side, dynamic=True),
            "image": torch.compile(image_side, dynamic=True),
        }
        probe_q = np.array([[0.5, 0.1, 0.0]], dtype=np.float32)
        probe_v = np.array([[0.2, 0.3, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32)
        for side in ("caption", "image"):  # build both now so a compiler failure surfaces here
            got = self.order_violation(probe_q, probe_v, side)  # type: ignore[arg-type]
            want = NumpyKernel().order_violation(probe_q, probe_v, side)  # type: ignore[arg-type]
            if not np.allclose(got, want, atol=1e-6):
                raise RuntimeError("compiled order-violation kernel disagrees with numpy")

    def order_violation(self, queries: np.ndarray, items: np.ndarray, query_side: Side) -> np.ndarray:
        torch = self._torch
        with torch.no_grad():
            q = torch.from_numpy(np.ascontiguousarray(queries))
            v = torch.from_numpy(_writable_view(items))
            return self._fns[query_side](q, v).numpy().T


def _writable_view(a: np.ndarray) -> np.ndarray:
    """torch.from_numpy warns on read-only arrays; galleries are mapped copy-on-write, other inputs copied."""
    if a.flags.writeable and a.flags.c_contiguous:
        return a
    return np.array(a, dtype=np.float32, order="C")


_kernels: dict[str, Kernel] = {}
_kernel_lock = threading.Lock()


def get_kernel(name: str | None = None) -> Kernel:
    """The order-violation kernel named by ``name`` (the ``scorer`` setting; default auto), built once per
    process."""
    name = (name or "auto").lower()
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; expected one of {', '.join(SCORERS)}")
    if name == "auto":
        name = "compiled" if (shutil.which("cc") or shutil.which("gcc")) else "numpy"
    with _kernel_lock:
        if name not in _kernels:
            if name == "compiled":
                try:
                    _kernels[name] = CompiledKernel()
                except Exception as exc:  # no compiler, inductor failure: stay correct, just slower
                    log.warning("compiled scorer unavailable (%s); using numpy", exc)
                    _kernels[name] = NumpyKernel()
            else:
                _kernels[name] = NumpyKernel()
        return _kernels[name]


# -- scoring and top-k ------------------------------------------------------------------------------------
def score_block(
    queries: np.ndarray,
    items: np.ndarray,
    metric: str,
    *,
    query_side: Side = "caption",
    kernel: Kernel | None = None,
) -> np.ndarray:
    """Scores (Q, n) of every query against every item, in the metric's own units. The order-violation
    kernel is looked up only when needed: cosine galleries must never wait for it to compile."""
    if metric == "order_violation":
        return (kernel or get_kernel()).order_violation(queries, items, query_side)
    if metric == "negative_cosine":
        return negative_cosine(queries, items)
    if metric == "cosine":
        items = np.asarray(items)
        norms = np.sqrt(np.einsum("ij,ij->i", items, items))
        qn = queries / np.sqrt((queries * queries).sum(axis=1, keepdims=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.nan_to_num((qn @ items.T) / norms[None, :], nan=0.0)
    raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")


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
) -> TopK:
    """Exact top-k of ``items`` (N, D), possibly a memory map, for each query (Q, D).

    Args:
        metric: ``order_violation`` / ``negative_cosine`` (lower is better) or ``cosine`` (higher is better).
        query_side: for order violation, whether the queries are captions (E(query, item)) or images
            (E(item, query)).
        valid: optional (N,) bool mask; False rows (deleted items) are never returned.
        block_rows: gallery rows per block (default: ~32 MiB of vectors); memory is O(Q * block_rows).

    Returns:
        ``TopK`` with ties broken by ascending position.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    n_items, dim = items.shape
    if metric == "order_violation":
        kernel = kernel or get_kernel()
    rows = block_rows or max(256, _BLOCK_FLOATS // max(dim, 1))  # memory: the block plus Q x rows scores
    sign = np.float32(-1.0 if METRICS[metric]["direction"] == "higher_is_better" else 1.0)
    best_keys = np.full((q.shape[0], 0), np.inf, dtype=np.float32)
    best_pos = np.zeros((q.shape[0], 0), dtype=np.int64)
    for start in range(0, n_items, rows):
        block = items[start : start + rows]
        keys = score_block(q, block, metric, query_side=query_side, kernel=kernel).astype(np.float32)
        keys *= sign  # selection always keeps the smallest keys
        if valid is not None:
            keys[:, ~valid[start : start + block.shape[0]]] = np.inf
        best_keys, best_pos = _merge(best_keys, best_pos, keys, start, k)
    out_pos, out_scores = [], []
    for keys_row, pos_row in zip(best_keys, best_pos, strict=True):
        keep = np.isfinite(keys_row)
        out_pos.append(pos_row[keep])
        out_scores.append(keys_row[keep] * sign)
    return TopK(out_pos, out_scores, metric)


def _merge(
    best_keys: np.ndarray, best_pos: np.ndarray, keys: np.ndarray, offset: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Keep the k smallest (key, position) pairs of the running best plus this block, stably."""
    n_queries, n = keys.shape
    if n > k:
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
