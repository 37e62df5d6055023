"""The pruned order-violation top-k (``order_pruning``) returns the full scan's ids and scores bit for bit:
random galleries of many shapes, both query sides, heavy ties, duplicates, deleted rows, non-finite values,
k beyond the gallery, thread splits, shard layouts merged as ``serve --ray`` merges them, and a real store.
Also that it does skip work where the data lets it (the visited fraction falls below 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.runtime.order_pruning import PrunedSearch, _canonical
from lnserve.app.runtime.retrieval import NumpyKernel, PrunedKernel, Side, get_kernel, top_k
from lnserve.app.scale.merge import merge_top_k

FULL = get_kernel("numba")
PRUNED = get_kernel("pruned")


def _same(
    a_pos: list[np.ndarray], a_sc: list[np.ndarray], b_pos: list[np.ndarray], b_sc: list[np.ndarray]
) -> bool:
    """Positions equal and scores equal bit for bit (float32 bit patterns)."""
    return len(a_pos) == len(b_pos) and all(
        np.array_equal(p, q) and np.array_equal(s.view(np.int32), t.view(np.int32))
        for p, q, s, t in zip(a_pos, b_pos, a_sc, b_sc, strict=True)
    )


def _check(
    queries: np.ndarray, items: np.ndarray, k: int, side: Side, valid: np.ndarray | None = None
) -> None:
    want = top_k(queries, items, k, metric="order_violation", query_side=side, valid=valid, kernel=FULL)
    got = top_k(queries, items, k, metric="order_violation", query_side=side, valid=valid, kernel=PRUNED)
    assert _same(got.positions, got.scores, want.positions, want.scores)


def _order_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = np.abs(rng.standard_normal((n, dim), dtype=np.float32))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_the_pruned_kernel_is_what_the_pruned_scorer_names() -> None:
    assert isinstance(PRUNED, PrunedKernel)
    assert PRUNED.name == "pruned"


@pytest.mark.parametrize("seed", range(12))
def test_random_galleries_match_the_full_scan_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dim = int(rng.choice([1, 7, 16, 37, 64, 130, 256]))
    n = int(rng.integers(1, 3000))
    k = int(rng.choice([1, 3, 10, 50]))
    items = _order_vectors(rng, n, dim)
    queries = _order_vectors(rng, int(rng.integers(1, 9)), dim)
    valid = rng.random(n) > 0.2 if seed % 3 == 0 else None
    for side in ("caption", "image"):
        _check(queries, items, k, side, valid)  # type: ignore[arg-type]


@pytest.mark.parametrize("side", ["caption", "image"])
def test_ties_and_duplicates_go_to_the_earlier_position(side: Side) -> None:
    rng = np.random.default_rng(5)
    base = _order_vectors(rng, 40, 48)
    items = base[rng.integers(0, 40, size=4000)]  # every item repeated ~100 times: ties everywhere
    items[::7] = np.round(items[::7] * 4) / 4  # coarse values: many equal scores across different vectors
    queries = np.concatenate([base[:3], np.round(base[3:6] * 4) / 4])
    for k in (1, 10, 150):
        _check(queries, items, k, side)


def test_zero_scores_and_a_query_dominated_by_everything() -> None:
    items = np.ones((500, 32), dtype=np.float32)
    items[100:] = 2.0
    _check(np.zeros((2, 32), dtype=np.float32), items, 10, "caption")  # every score is 0: positions decide
    _check(np.zeros((2, 32), dtype=np.float32), items, 10, "image")


def test_non_finite_values_are_never_returned_as_the_full_scan_never_does() -> None:
    rng = np.random.default_rng(2)
    items = _order_vectors(rng, 800, 40)
    items[3, 5] = np.nan
    items[10, 0] = np.inf
    items[11, 1] = -np.inf
    items[12] = 3e38  # squares overflow to inf
    queries = _order_vectors(rng, 3, 40)
    queries[1, 2] = -3e38
    for side in ("caption", "image"):
        _check(queries, items, 20, side)  # type: ignore[arg-type]


def test_k_beyond_the_gallery_and_all_rows_deleted() -> None:
    rng = np.random.default_rng(3)
    items = _order_vectors(rng, 30, 20)
    queries = _order_vectors(rng, 2, 20)
    _check(queries, items, 100, "caption")
    _check(queries, items, 5, "caption", valid=np.zeros(30, dtype=bool))


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_thread_splits_never_change_the_result(threads: int) -> None:
    rng = np.random.default_rng(4)
    items = _order_vectors(rng, 5000, 64)
    queries = _order_vectors(rng, 5, 64)
    want = PrunedSearch(1).top_k(queries, items, 10, True, None)
    got = PrunedSearch(threads).top_k(queries, items, 10, True, None)
    assert _same(*got, *want)


@pytest.mark.parametrize("shards", [1, 2, 3, 5])
def test_every_shard_layout_merges_to_the_single_store_result(shards: int) -> None:
    """Items dealt to shards round-robin, in runs, or at random, each shard keeping insertion order: the
    per-shard pruned lists merged by (score, global position) are the one-store full scan's list."""
    rng = np.random.default_rng(shards)
    n, dim, k = 3000, 64, 10
    items = _order_vectors(rng, n, dim)
    items[n // 2 :: 50] = items[0]  # duplicates of one item spread over the shards: cross-shard ties
    queries = np.concatenate([_order_vectors(rng, 4, dim), items[:1]])
    layouts = {
        "round-robin": np.arange(n) % shards,
        "runs": np.arange(n) * shards // n,
        "random": rng.integers(0, shards, size=n),
    }
    for side in ("caption", "image"):
        want = top_k(queries, items, k, metric="order_violation", query_side=side, kernel=FULL)  # type: ignore[arg-type]
        for owner in layouts.values():
            per_shard = []
            for s in range(shards):
                rows = np.flatnonzero(owner == s)  # global positions, ascending
                found = top_k(
                    queries, items[rows], k, metric="order_violation", query_side=side, kernel=PRUNED
                )  # type: ignore[arg-type]
                per_shard.append(
                    [
                        [
                            {"score": sc, "pos": int(rows[p]), "at": int(rows[p])}
                            for p, sc in zip(pos, scores, strict=True)
                        ]
                        for pos, scores in zip(found.positions, found.scores, strict=True)
                    ]
                )
            for qi in range(len(queries)):
                merged = merge_top_k([lists[qi] for lists in per_shard], k, "lower_is_better")
                assert [h["at"] for h in merged] == want.positions[qi].tolist()
                got = np.array([h["score"] for h in merged], dtype=np.float32)
                assert np.array_equal(got.view(np.int32), want.scores[qi].view(np.int32))


def test_canonical_scores_equal_the_numpy_kernel_bit_for_bit() -> None:
    rng = np.random.default_rng(6)
    for dim in (1, 15, 16, 17, 33, 1024):
        items = rng.random((20, dim), dtype=np.float32)
        q = rng.random(dim, dtype=np.float32)
        for caption, side in ((True, "caption"), (False, "image")):
            want = NumpyKernel(threads=1).order_violation(q[None], items, side)[0]  # type: ignore[arg-type]
            got = np.array([_canonical(q, items, r, caption) for r in range(20)], dtype=np.float32)
            assert np.array_equal(got.view(np.int32), want.view(np.int32))


def test_work_is_skipped_where_the_data_allows() -> None:
    rng = np.random.default_rng(7)
    items = _order_vectors(rng, 20000, 256)
    queries = _order_vectors(rng, 4, 256)
    _check(queries, items, 10, "caption")
    assert PRUNED.last_visited_fraction < 0.95  # type: ignore[attr-defined]


def test_a_store_with_the_pruned_scorer_answers_as_the_numba_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    model = ModelRef(name="toy", identity="a" * 64, family="order-embedding", method="order", dim=64)
    vectors = _order_vectors(rng, 1500, 64)
    queries = _order_vectors(rng, 3, 64)
    answers = []
    for scorer in ("numba", "pruned"):
        store = GalleryStore(tmp_path / scorer, scorer=scorer)
        store.create("g", kind="images", model=model)
        store.add("g", vectors, ids=[f"i{i}" for i in range(len(vectors))], model=model)
        store.delete_item("g", "i3")
        answers.append(store.search("g", queries, 25, query_kind="captions", model=model))
    assert answers[0] == answers[1]


def test_concurrent_searches_each_get_their_own_exact_answer() -> None:
    """The service searches from several threads at once; each answer is that query's full-scan answer."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(9)
    items = _order_vectors(rng, 4000, 64)
    batches = [_order_vectors(rng, 3, 64) for _ in range(6)]
    search = PrunedSearch(2)
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda q: search.top_k(q, items, 10, True, None), batches))
    for q, answer in zip(batches, got, strict=True):
        want = top_k(q, items, 10, metric="order_violation", kernel=FULL)
        assert _same(*answer, want.positions, want.scores)
