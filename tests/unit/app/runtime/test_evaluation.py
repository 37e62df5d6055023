"""Rank statistics: the golden evaluation blocks reproduce exactly; ties follow the stable order."""

from __future__ import annotations

import numpy as np
import pytest

from lnserve.app.runtime.evaluation import i2t, i2t_ranks, plan_folds, t2i, t2i_ranks
from tests.conftest import OE_MODELS, golden


def _block(name: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    g = golden(name)
    return g["errs"][g["eval_caption_indices"]][:, : int(g["eval_K"])], g


@pytest.mark.parametrize("name", OE_MODELS)
def test_golden_blocks_reproduce_t2i_i2t_exactly(name: str) -> None:
    block, g = _block(name)
    assert t2i(block).as_tuple() == tuple(g["t2i_stats"].tolist())
    assert i2t(block).as_tuple() == tuple(g["i2t_stats"].tolist())


def _loop_ranks(errs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The original per-row loops with a stable argsort: the reference for tie handling."""
    t = np.array([np.where(np.argsort(row, kind="stable") == c // 5)[0][0] for c, row in enumerate(errs)])
    i = np.array(
        [np.where(np.argsort(errs[:, j], kind="stable") // 5 == j)[0][0] for j in range(errs.shape[1])]
    )
    return t, i


def test_ties_follow_the_stable_order() -> None:
    rng = np.random.default_rng(0)
    errs = rng.integers(0, 4, size=(30, 6)).astype(np.float32)  # many exact ties
    t_ref, i_ref = _loop_ranks(errs)
    assert np.array_equal(t2i_ranks(errs), t_ref)
    assert np.array_equal(i2t_ranks(errs), i_ref)


def test_medr_is_floor_median_plus_one_and_meanr_mean_plus_one() -> None:
    errs = np.full((10, 2), 1.0, dtype=np.float32)
    errs[:5, 1] = 0.0  # captions of image 0 prefer image 1: rank 1
    errs[5:, 0] = 2.0  # captions of image 1 prefer image 1: rank 0
    stats = t2i(errs)
    assert stats.as_tuple() == (50.0, 100.0, 100.0, 1.0, 1.5)  # median(0..,1..) = 0.5 -> floor 0 + 1


def test_bad_shape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\(5 N, N\)"):
        t2i(np.zeros((7, 2)))


def test_fold_plan() -> None:
    small = plan_folds(8, 5)
    assert small.folds == [(0, 8)] and "one fold" in small.notes[0]
    assert plan_folds(5000, 5).folds == [(i * 1000, (i + 1) * 1000) for i in range(5)]
    assert plan_folds(5000, 5).notes == []
    partial = plan_folds(2500, 5)
    assert partial.folds == [(0, 1000), (1000, 2000)] and len(partial.notes) == 2
