"""Length bucketing: sort by length, batch, pad, and put results back in the caller's order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


def length_batches(lengths: Sequence[int], batch_size: int) -> Iterator[np.ndarray]:
    """Yield index arrays of at most ``batch_size`` items of similar length (longest first).

    A stable sort keeps equal-length items in input order, so batching is deterministic.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def pad_ids(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id sequences into a time-major (T, B) int64 array (pad id 0) and their lengths (B,)."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    ids = np.zeros((int(lengths.max(initial=0)), len(seqs)), dtype=np.int64)
    for b, seq in enumerate(seqs):
        ids[: len(seq), b] = seq
    return ids, lengths


def reverse_padded(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Reverse each row's valid steps of a right-padded (T, B, ...) batch; padding stays at the end."""
    t = np.arange(x.shape[0])[:, None]
    src = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # (T, B)
    return np.take_along_axis(x, src.reshape(src.shape + (1,) * (x.ndim - 2)), axis=0)
