"""The shard merge gives exactly one store's top-k: same ids, same scores, same tie order.

The reference is the single-process selection itself (``runtime.retrieval.top_k`` over all items, ties by
position); the shards are the same items dealt out in insertion-ordered runs, each searched with the same
``top_k``, its local positions mapped back to global ones.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lnserve.app.runtime.retrieval import METRICS, NumpyKernel, top_k
from lnserve.app.scale.merge import merge_results, merge_top_k


def _hits(positions: np.ndarray, scores: np.ndarray, to_global: np.ndarray | None = None) -> list[dict]:
    return [
        {"id": f"i{int(to_global[p] if to_global is not None else p)}", "score": float(s), "payload": None,
         "pos": int(to_global[p] if to_global is not None else p)}
        for p, s in zip(positions, scores, strict=True)
    ]  # fmt: skip


def _sharded(
    queries: np.ndarray, items: np.ndarray, k: int, metric: str, runs: list[tuple[int, int, int]]
) -> list[list[dict]]:
    """``runs``: (shard, start, stop) global row ranges in insertion order, as the coordinator places them."""
    n_shards = 1 + max(s for s, _, _ in runs)
    per_shard = []
    for shard in range(n_shards):
        rows = np.concatenate([np.arange(a, b) for s, a, b in runs if s == shard] or [np.zeros(0, int)])
        found = top_k(queries, items[rows], k, metric=metric, kernel=NumpyKernel(1))
        per_shard.append([_hits(p, sc, rows) for p, sc in zip(found.positions, found.scores, strict=True)])
    return merge_results(per_shard, k, METRICS[metric]["direction"])


def _single(queries: np.ndarray, items: np.ndarray, k: int, metric: str) -> list[list[dict]]:
    found = top_k(queries, items, k, metric=metric, kernel=NumpyKernel(1))
    return [
        [{key: v for key, v in h.items() if key != "pos"} for h in _hits(p, s)]
        for p, s in zip(found.positions, found.scores, strict=True)
    ]


@pytest.mark.parametrize("metric", ["order_violation", "cosine"])
@pytest.mark.parametrize("k", [1, 3, 7, 40])
def test_planted_ties_across_shards_keep_insertion_order(metric: str, k: int) -> None:
    """Many exact duplicates, interleaved over three shards: ties must come back by global position."""
    rng = np.random.default_rng(3)
    # halves: every sum is exact in float32, so no BLAS summation order can split a planted tie
    distinct = (np.round(np.abs(rng.normal(size=(4, 8))) * 2) / 2).astype(np.float32)
    items = distinct[rng.integers(0, 4, size=30)]  # 30 rows, only 4 distinct vectors: ties everywhere
    queries = (np.round(np.abs(rng.normal(size=(5, 8))) * 2) / 2).astype(np.float32)
    runs = [(0, 0, 4), (1, 4, 9), (2, 9, 12), (0, 12, 20), (1, 20, 23), (2, 23, 30)]
    assert _sharded(queries, items, k, metric, runs) == _single(queries, items, k, metric)


def test_random_galleries_and_placements_match_one_store() -> None:
    rng = np.random.default_rng(11)
    for trial in range(30):
        n, dim = int(rng.integers(1, 60)), 6
        items = np.round(np.abs(rng.normal(size=(n, dim))), 1).astype(np.float32)  # rounding plants ties
        queries = np.round(np.abs(rng.normal(size=(3, dim))), 1).astype(np.float32)
        cuts = sorted({0, n, *rng.integers(0, n, size=4).tolist()})
        runs = [(int(rng.integers(0, 3)), a, b) for a, b in itertools.pairwise(cuts)]
        k = int(rng.integers(1, n + 3))
        assert _sharded(queries, items, k, "order_violation", runs) == _single(
            queries, items, k, "order_violation"
        ), trial


@pytest.mark.parametrize("metric", ["cosine", "negative_cosine"])
def test_cosine_scores_are_bit_identical_in_any_shard_layout(metric: str) -> None:
    """Unrounded floats and planted duplicates: every shard layout and block size gives one store's floats
    (the dot products sum in a fixed order, not BLAS's shape- and CPU-dependent one)."""
    rng = np.random.default_rng(12)
    for trial in range(10):
        n, dim = int(rng.integers(5, 80)), int(rng.integers(3, 70))
        items = rng.standard_normal((n, dim)).astype(np.float32)
        items[rng.integers(0, n, size=n // 3)] = items[0]  # duplicates of row 0 all over
        queries = rng.standard_normal((4, dim)).astype(np.float32)
        cuts = sorted({0, n, *rng.integers(0, n, size=4).tolist()})
        runs = [(int(rng.integers(0, 3)), a, b) for a, b in itertools.pairwise(cuts)]
        k = int(rng.integers(1, n + 3))
        assert _sharded(queries, items, k, metric, runs) == _single(queries, items, k, metric), trial
        small = top_k(queries, items, k, metric=metric, kernel=NumpyKernel(1), block_rows=3)
        whole = top_k(queries, items, k, metric=metric, kernel=NumpyKernel(1))
        for a, b in zip(small.scores, whole.scores, strict=True):
            assert np.array_equal(a, b), trial


def test_merge_top_k_orders_by_score_then_position_and_drops_pos() -> None:
    a = [
        {"id": "a", "score": 1.0, "payload": 1, "pos": 5},
        {"id": "b", "score": 2.0, "payload": None, "pos": 0},
    ]
    b = [
        {"id": "c", "score": 1.0, "payload": None, "pos": 2},
        {"id": "d", "score": 2.0, "payload": None, "pos": 9},
    ]
    assert [h["id"] for h in merge_top_k([a, b], 3, "lower_is_better")] == ["c", "a", "b"]
    up = [sorted(x, key=lambda h: (-h["score"], h["pos"])) for x in (a, b)]
    assert [h["id"] for h in merge_top_k(up, 4, "higher_is_better")] == ["b", "d", "c", "a"]
    assert all("pos" not in h for h in merge_top_k([a, b], 4, "lower_is_better"))
    assert merge_top_k([[], []], 5, "lower_is_better") == []


def test_merge_refuses_unknown_direction_and_ragged_shards() -> None:
    with pytest.raises(ValueError):
        merge_top_k([[]], 1, "sideways")
    with pytest.raises(ValueError):
        merge_results([[[]], [[], []]], 1, "lower_is_better")
