"""Exact top-k: golden error-matrix parity in both directions, score direction, ties, masks, kernels."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from lnserve.app.runtime.retrieval import CompiledKernel, NumpyKernel, score_info, top_k
from lnserve.app.runtime.scoring import error_matrix, order_violation
from tests.conftest import OE_MODELS, golden

NUMPY = NumpyKernel()


def _metric(name: str) -> str:
    return "negative_cosine" if name == "oe_symmetric_gru" else "order_violation"


@pytest.mark.parametrize("name", OE_MODELS)
def test_caption_to_image_matches_golden_errors(name: str) -> None:
    g = golden(name)
    errs = g["errs"]
    got = top_k(g["sent_emb"], g["img_emb"], errs.shape[1], metric=_metric(name), kernel=NUMPY, block_rows=5)
    for row, pos, scores in zip(errs, got.positions, got.scores, strict=True):
        want = np.argsort(row, kind="stable")
        assert np.array_equal(pos, want)
        np.testing.assert_allclose(scores, row[want], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", OE_MODELS)
def test_image_to_caption_matches_golden_errors(name: str) -> None:
    g = golden(name)
    errs = g["errs"].T  # (images, captions): the image is the second argument of E
    got = top_k(
        g["img_emb"], g["sent_emb"], 10, metric=_metric(name), query_side="image", kernel=NUMPY, block_rows=7
    )
    for col, pos, scores in zip(errs, got.positions, got.scores, strict=True):
        want = np.argsort(col, kind="stable")[:10]
        assert np.array_equal(pos, want)
        np.testing.assert_allclose(scores, col[want], atol=1e-5, rtol=0)


def test_directions_are_stated() -> None:
    assert score_info("order_violation")["direction"] == "lower_is_better"
    assert score_info("negative_cosine")["direction"] == "lower_is_better"
    assert score_info("cosine")["direction"] == "higher_is_better"


def test_order_violation_is_asymmetric_and_lower_is_better() -> None:
    caption = np.array([[0.2, 0.2]], dtype=np.float32)
    images = np.array([[0.0, 0.0], [0.5, 0.5], [0.2, 0.1]], dtype=np.float32)
    got = top_k(caption, images, 3, metric="order_violation", kernel=NUMPY)
    assert got.positions[0].tolist() == [1, 2, 0]  # image 1 dominates the caption: zero violation
    np.testing.assert_allclose(got.scores[0], [0.0, 0.01, 0.08], atol=1e-7)
    # the same vectors with the query in the image slot: E(item, query)
    flipped = top_k(caption, images, 3, metric="order_violation", query_side="image", kernel=NUMPY)
    assert flipped.positions[0].tolist() == [0, 2, 1]


def test_cosine_is_higher_better_and_negative_cosine_lower_better() -> None:
    rng = np.random.default_rng(1)
    items = rng.standard_normal((50, 8)).astype(np.float32)
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    cos = top_k(items[3:4] * 2.0, items, 3, metric="cosine", kernel=NUMPY)
    assert cos.positions[0][0] == 3 and cos.scores[0][0] == pytest.approx(1.0, abs=1e-6)
    assert (np.diff(cos.scores[0]) <= 0).all()
    neg = top_k(items[3:4], items, 3, metric="negative_cosine", kernel=NUMPY)
    assert neg.positions[0][0] == 3 and neg.scores[0][0] == pytest.approx(-1.0, abs=1e-6)
    assert (np.diff(neg.scores[0]) >= 0).all()


def test_ties_break_by_position_across_blocks() -> None:
    items = np.zeros((20, 4), dtype=np.float32)
    items[::2] = 1.0  # ten identical best items at even positions
    got = top_k(
        np.full((1, 4), 0.5, np.float32), items, 4, metric="order_violation", kernel=NUMPY, block_rows=3
    )
    assert got.positions[0].tolist() == [0, 2, 4, 6]


def test_random_batches_with_mask_match_a_full_sort() -> None:
    rng = np.random.default_rng(2)
    items = np.abs(rng.standard_normal((257, 16))).astype(np.float32)
    queries = np.abs(rng.standard_normal((9, 16))).astype(np.float32)
    valid = rng.random(257) > 0.3
    errs = error_matrix(queries, items, "order")
    errs[:, ~valid] = np.inf
    for k in (1, 10, 300):
        got = top_k(queries, items, k, metric="order_violation", valid=valid, kernel=NUMPY, block_rows=50)
        for row, pos, scores in zip(errs, got.positions, got.scores, strict=True):
            want = np.argsort(row, kind="stable")[: min(k, int(valid.sum()))]
            assert np.array_equal(pos, want)
            np.testing.assert_allclose(scores, row[want], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(
    not (shutil.which("cc") or shutil.which("gcc")), reason="torch.compile needs a C compiler"
)
def test_compiled_kernel_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    items = np.abs(rng.standard_normal((300, 32))).astype(np.float32)
    queries = np.abs(rng.standard_normal((5, 32))).astype(np.float32)
    compiled = CompiledKernel()
    for side in ("caption", "image"):
        np.testing.assert_allclose(
            compiled.order_violation(queries, items, side),  # type: ignore[arg-type]
            NUMPY.order_violation(queries, items, side),  # type: ignore[arg-type]
            rtol=1e-5,
            atol=1e-6,
        )


def _kernels() -> list:
    kernels = [NUMPY, NumpyKernel(threads=1), NumpyKernel(threads=3)]
    if shutil.which("cc") or shutil.which("gcc"):
        kernels.append(CompiledKernel())
    return kernels


def _full_scan(queries: np.ndarray, items: np.ndarray, k: int, side: str) -> tuple[np.ndarray, np.ndarray]:
    """Plain reference: the whole (Q, N) matrix of the reference formula in float32, stable sort."""
    errs = order_violation(queries, items) if side == "caption" else order_violation(items, queries).T
    order = np.argsort(errs, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(errs, order, 1)


@pytest.mark.parametrize("side", ["caption", "image"])
def test_kernels_match_a_full_scan_with_planted_ties(side: str) -> None:
    rng = np.random.default_rng(4)
    items = np.abs(rng.standard_normal((1000, 64))).astype(np.float32)
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    items[500:520] = items[7]  # planted exact ties, spread over several blocks
    items[900] = items[7]
    queries = np.abs(rng.standard_normal((33, 64))).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    queries[5] = items[7]  # a query whose best items are all tied at zero
    want_pos, want_scores = _full_scan(queries, items, 25, side)
    for kernel in _kernels():
        for nq in (1, 33):
            got = top_k(queries[:nq], items, 25, metric="order_violation", query_side=side, kernel=kernel,
                        block_rows=97)  # fmt: skip
            for r in range(nq):
                assert np.array_equal(got.positions[r], want_pos[r]), (kernel.name, r)
                np.testing.assert_allclose(got.scores[r], want_scores[r], rtol=0, atol=1e-6)
    assert _full_scan(queries[5:6], items, 25, side)[0][0][:3].tolist() == [7, 500, 501]


@pytest.mark.parametrize("name", OE_MODELS)
def test_kernels_match_golden_errors_exactly_ranked(name: str) -> None:
    if _metric(name) != "order_violation":
        pytest.skip("symmetric model: no order-violation kernel involved")
    g = golden(name)
    for kernel in _kernels():
        got = top_k(g["sent_emb"], g["img_emb"], 10, metric="order_violation", kernel=kernel, block_rows=4)
        for row, pos, scores in zip(g["errs"], got.positions, got.scores, strict=True):
            want = np.argsort(row, kind="stable")[:10]
            assert np.array_equal(pos, want), kernel.name
            np.testing.assert_allclose(scores, row[want], atol=1e-5, rtol=0)
