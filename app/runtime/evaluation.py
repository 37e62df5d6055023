"""The order-embedding evaluation protocol (spec §8) as pure functions over an error matrix.

``errs`` has shape (5 N, N): captions 5i..5i+4 belong to image i, lower error is better. Ranks use a STABLE
order (ties go to the lower index), where the original used NumPy's unstable default; on tie-free blocks the
two agree exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

CAPTIONS_PER_IMAGE = 5
FOLD_IMAGES = 1000


@dataclass(frozen=True)
class RankStats:
    """[R@1, R@5, R@10, medr, meanr] as the original ``t2i`` / ``i2t`` return them."""

    r1: float
    r5: float
    r10: float
    medr: float
    meanr: float

    def as_tuple(self) -> tuple[float, float, float, float, float]:
        return (self.r1, self.r5, self.r10, self.medr, self.meanr)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _check(errs: np.ndarray, n_caps: int) -> np.ndarray:
    errs = np.asarray(errs)
    if errs.ndim != 2 or errs.shape[0] != n_caps * errs.shape[1]:
        raise ValueError(f"error matrix must be ({n_caps} N, N), got {errs.shape}")
    return errs


def _stable_rank(values: np.ndarray, targets: np.ndarray, target_idx: np.ndarray) -> np.ndarray:
    """Position of ``values[r, target_idx[r]]`` in a stable ascending sort of row r (values: (R, M))."""
    t = targets[:, None]
    before = np.arange(values.shape[1])[None, :] < target_idx[:, None]
    return (values < t).sum(axis=1) + ((values == t) & before).sum(axis=1)


def t2i_ranks(errs: np.ndarray, n_caps: int = CAPTIONS_PER_IMAGE) -> np.ndarray:
    """Per caption: 0-based rank of its own image among all images."""
    errs = _check(errs, n_caps)
    own = np.arange(errs.shape[0]) // n_caps
    return _stable_rank(errs, errs[np.arange(errs.shape[0]), own], own)


def i2t_ranks(errs: np.ndarray, n_caps: int = CAPTIONS_PER_IMAGE) -> np.ndarray:
    """Per image: 0-based rank of its best-placed own caption among all captions."""
    cols = _check(errs, n_caps).T  # (N images, 5N captions)
    ranks = np.empty(cols.shape[0], dtype=np.int64)
    for j, col in enumerate(cols):
        own = np.arange(n_caps * j, n_caps * (j + 1))
        rows = np.broadcast_to(col, (n_caps, col.shape[0]))
        ranks[j] = _stable_rank(rows, col[own], own).min()
    return ranks


def rank_stats(ranks: np.ndarray) -> RankStats:
    """R@K = 100 * fraction(rank < K); medr = floor(median) + 1; meanr = mean + 1."""
    ranks = np.asarray(ranks, dtype=np.float64)
    return RankStats(
        r1=100.0 * float((ranks < 1).sum()) / len(ranks),
        r5=100.0 * float((ranks < 5).sum()) / len(ranks),
        r10=100.0 * float((ranks < 10).sum()) / len(ranks),
        medr=float(np.floor(np.median(ranks)) + 1),
        meanr=float(ranks.mean() + 1),
    )


def t2i(errs: np.ndarray, n_caps: int = CAPTIONS_PER_IMAGE) -> RankStats:
    """Image retrieval (caption -> image), as ``evaluation.t2i``."""
    return rank_stats(t2i_ranks(errs, n_caps))


def i2t(errs: np.ndarray, n_caps: int = CAPTIONS_PER_IMAGE) -> RankStats:
    """Caption retrieval (image -> caption), as ``evaluation.i2t``."""
    return rank_stats(i2t_ranks(errs, n_caps))


@dataclass
class FoldPlan:
    """Which images each fold uses, plus notes for the user when the data does not fill 1,000-image folds."""

    folds: list[tuple[int, int]]  # [start, stop) image ranges
    notes: list[str]


def plan_folds(n_images: int, folds: int, fold_images: int = FOLD_IMAGES) -> FoldPlan:
    """Folds of 1,000 images (5,000 captions); smaller data -> one fold with every image."""
    if n_images < fold_images:
        return FoldPlan(
            [(0, n_images)],
            [f"only {n_images} images (< {fold_images}): one fold with all images, not the paper's protocol"],
        )
    usable = min(folds, n_images // fold_images)
    notes = []
    if usable < folds:
        notes.append(f"{n_images} images fill only {usable} fold(s) of {fold_images}; asked for {folds}")
    if usable * fold_images < n_images:
        notes.append(f"images {usable * fold_images}..{n_images - 1} are outside the folds and not evaluated")
    return FoldPlan([(f * fold_images, (f + 1) * fold_images) for f in range(usable)], notes)


def mean_stats(stats: list[RankStats]) -> RankStats:
    """Each metric averaged over the folds, as the original 5-fold evaluation does."""
    return RankStats(*np.mean([s.as_tuple() for s in stats], axis=0).tolist())
