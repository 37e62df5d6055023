"""Fold boundaries and shuffles exactly as the original scripts drew them."""

from __future__ import annotations

import numpy as np

from .errors import TooFewItems

C_GRID = tuple(2.0**t for t in range(9))  # ``[2**t for t in range(0, 9, 1)]``


def kfold(n: int, k: int, *, shuffle_seed: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``sklearn.cross_validation.KFold(n, n_folds=k)``: contiguous folds, the first ``n % k`` one longer.

    Without ``shuffle`` the old KFold ignored ``random_state`` (the classification and TREC scripts pass one
    anyway); with ``shuffle_seed`` (MSRP) the indices are shuffled once by ``RandomState(seed).shuffle``."""
    if not 2 <= k <= n:
        raise TooFewItems(f"{n} items cannot be split into {k} folds")
    idx = np.arange(n)
    if shuffle_seed is not None:
        np.random.RandomState(shuffle_seed).shuffle(idx)
    sizes = np.full(k, n // k)
    sizes[: n % k] += 1
    out, start = [], 0
    for size in sizes:
        mask = np.zeros(n, dtype=bool)
        mask[idx[start : start + size]] = True
        out.append((np.flatnonzero(~mask), np.flatnonzero(mask)))  # as the old iterator: via a mask, sorted
        start += size
    return out


def shuffled_order(n: int, seed: int) -> np.ndarray:
    """``RandomState(seed).shuffle(arange(n))``: ``dataset_handler.shuffle_data`` and
    ``sklearn.utils.shuffle(..., random_state=seed)`` (TREC, SICK) both draw this permutation."""
    idx = np.arange(n)
    np.random.RandomState(seed).shuffle(idx)
    return idx


def best_index(scores: list[float]) -> int:
    """``np.argmax``: the first of equal best scores wins (the smallest C)."""
    return int(np.argmax(scores))
