"""Exact top-k: golden error-matrix parity in both directions, score direction, ties, masks, kernels."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.runtime.retrieval import (
    NumbaKernel,
    NumpyKernel,
    dot_scores,
    get_kernel,
    row_norms,
    score_block,
    score_info,
    top_k,
)
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


def _lane_reference(queries: np.ndarray, items: np.ndarray, side: str) -> np.ndarray:
    """The canonical float order, spelled out: lane l sums dims l, l + 16, ... one at a time (the last
    dim % 16 dims go to lanes 0, 1, ...), then lanes l and l + 8, l + 4, l + 2, l + 1 are added."""
    diff = queries[:, None, :] - items[None] if side == "caption" else items[None] - queries[:, None, :]
    sq = np.maximum(diff, np.float32(0)) ** 2
    acc = np.zeros((*sq.shape[:2], 16), dtype=np.float32)
    full = sq.shape[2] // 16 * 16
    for d in range(0, full, 16):
        acc += sq[:, :, d : d + 16]
    acc[:, :, : sq.shape[2] - full] += sq[:, :, full:]
    for width in (8, 4, 2, 1):
        acc = acc[:, :, :width] + acc[:, :, width : 2 * width]
    return acc[:, :, 0]


_NUMBA = NumbaKernel()


def _kernels() -> list:
    return [NUMPY, NumpyKernel(threads=1), NumpyKernel(threads=3), _NUMBA, NumbaKernel(threads=1),
            NumbaKernel(threads=3)]  # fmt: skip


@pytest.mark.parametrize("side", ["caption", "image"])
def test_kernels_follow_the_lane_order_bit_for_bit(side: str) -> None:
    rng = np.random.default_rng(3)
    shapes = ((1024, 5, 600), (37, 9, 203), (16, 4, 4), (5, 1, 3), (1, 3, 2), (33, 1, 1), (8, 2, 0))
    for dim, n_queries, n_items in shapes:
        items = np.abs(rng.standard_normal((n_items, dim))).astype(np.float32)
        queries = np.abs(rng.standard_normal((n_queries, dim))).astype(np.float32)
        want = _lane_reference(queries, items, side)
        for kernel in _kernels():
            got = kernel.order_violation(queries, items, side)
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.array_equal(got, want), (kernel.name, dim, n_queries, n_items)


def test_dot_products_follow_the_lane_order_bit_for_bit() -> None:
    """Cosine galleries: the dot product in the same fixed order, so a score depends only on its two
    vectors (never on the matrix shape, the shard layout or the CPU's BLAS)."""
    rng = np.random.default_rng(4)
    for dim, n_queries, n_items in (
        (1024, 5, 600),
        (37, 9, 203),
        (16, 4, 4),
        (5, 1, 3),
        (33, 1, 1),
        (8, 2, 0),
    ):
        items = rng.standard_normal((n_items, dim)).astype(np.float32)
        queries = rng.standard_normal((n_queries, dim)).astype(np.float32)
        prod = queries[:, None, :] * items[None]
        acc = np.zeros((*prod.shape[:2], 16), dtype=np.float32)
        full = dim // 16 * 16
        for d in range(0, full, 16):
            acc += prod[:, :, d : d + 16]
        acc[:, :, : dim - full] += prod[:, :, full:]
        for width in (8, 4, 2, 1):
            acc = acc[:, :, :width] + acc[:, :, width : 2 * width]
        for kernel in _kernels():
            got = kernel.dot(queries, items)
            assert got.dtype == np.float32 and np.array_equal(got, acc[:, :, 0]), (kernel.name, dim)
        alone = [NUMPY.dot(queries, items[i : i + 1]) for i in range(n_items)]  # one row at a time
        assert np.array_equal(np.concatenate(alone, axis=1) if alone else acc[:, :, 0], acc[:, :, 0])


def test_numba_kernel_reads_read_only_memory_maps(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    items = rng.random((300, 64), dtype=np.float32)
    np.save(tmp_path / "g.npy", items)
    mapped = np.load(tmp_path / "g.npy", mmap_mode="r")  # read-only, as a gallery opened for reading
    queries = rng.random((6, 64), dtype=np.float32)
    for side in ("caption", "image"):
        got = _NUMBA.order_violation(queries, mapped[10:290], side)  # type: ignore[arg-type]
        assert np.array_equal(got, _lane_reference(queries, items[10:290], side))


def test_scorer_names() -> None:
    assert get_kernel("numba").name == "numba"
    assert get_kernel("compiled") is get_kernel("numba")  # the former torch.compile kernel's name
    assert get_kernel("auto").name == "numba"  # numba is a dependency, so auto finds it
    assert get_kernel("numpy").name == "numpy"
    with pytest.raises(ValueError, match="unknown scorer"):
        get_kernel("fortran")


def _former_compiled_kernel() -> Callable[[np.ndarray, np.ndarray, str], np.ndarray]:
    """The torch.compile kernel this module used before numba, as it was written."""
    import torch
    from torch._inductor import config as inductor_config

    def caption_side(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (q[None, :, :] - v[:, None, :]).clamp_min(0).square().sum(-1)

    def image_side(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (v[:, None, :] - q[None, :, :]).clamp_min(0).square().sum(-1)

    fns = {
        "caption": torch.compile(caption_side, dynamic=True),
        "image": torch.compile(image_side, dynamic=True),
    }

    def order_violation(queries: np.ndarray, items: np.ndarray, side: str) -> np.ndarray:
        # compiled in this process: inductor's worker pool leaves a socket for the garbage collector, whose
        # ResourceWarning then fails whichever test happens to run when it is collected
        with torch.no_grad(), inductor_config.patch(compile_threads=1):
            return fns[side](torch.from_numpy(queries), torch.from_numpy(items)).numpy().T

    return order_violation


def _avx512() -> bool:
    import torch

    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


@pytest.mark.slow  # over 10 s
@pytest.mark.skipif(
    not (shutil.which("cc") or shutil.which("gcc")), reason="torch.compile needs a C compiler"
)
# torch.compile runs a full garbage collection, which finalises whatever an earlier test in this process left
# unreferenced: an unclosed AF_UNIX socket's ResourceWarning then lands here (twice in full runs, never alone)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_scores_are_bit_identical_to_the_former_compiled_kernel() -> None:
    """The order is the one torch.compile emitted with 16-lane (AVX-512) vectors; with AVX2 it used 8 lanes,
    so on such hosts the former scores differed in the last bit and only the lane reference applies."""
    if not _avx512():
        pytest.skip("the former kernel used 16 lanes only on AVX-512 hosts")
    former = _former_compiled_kernel()
    rng = np.random.default_rng(6)
    for dim, n_queries, n_items in ((1024, 32, 700), (1024, 1, 300), (37, 5, 64)):
        items = rng.random((n_items, dim), dtype=np.float32)
        items /= np.linalg.norm(items, axis=1, keepdims=True)
        queries = rng.random((n_queries, dim), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        for side in ("caption", "image"):
            want = former(queries, items, side)
            for kernel in (_NUMBA, NUMPY):
                assert np.array_equal(kernel.order_violation(queries, items, side), want), (kernel.name, dim)


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


def _cosine_before(queries: np.ndarray, items: np.ndarray) -> np.ndarray:
    """The cosine formula before norms were computed once: ``nan_to_num(dot(q/|q|, items) / |items|)``."""
    q = np.asarray(queries, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        qn = q / row_norms(q)[:, None]
        return np.nan_to_num(dot_scores(qn, items) / row_norms(items)[None, :], nan=0.0)


def _cosine_data(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of very different magnitudes, zero rows, planted ties (copies, and power-of-two multiples whose
    cosine is exactly the same), a zero query and a query equal to a planted row."""
    rng = np.random.default_rng(11)
    items = rng.standard_normal((700, dim)).astype(np.float32)
    items *= (10.0 ** rng.integers(-6, 6, size=(700, 1))).astype(np.float32)
    items[[0, 123, 699]] = 0.0
    items[300:310] = items[7]
    items[[400, 650]] = items[7] * np.float32(4.0)
    queries = rng.standard_normal((33, dim)).astype(np.float32)
    queries[2] = 0.0
    queries[5] = items[7] * np.float32(3.0)
    return items, queries


@pytest.mark.parametrize("dim", [64, 70, 9])
def test_cosine_with_norms_computed_once_is_bit_identical_to_the_former_formula(dim: int) -> None:
    items, queries = _cosine_data(dim)
    norms = row_norms(items)
    want = _cosine_before(queries, items)
    assert np.array_equal(row_norms(items[100:250]), norms[100:250])  # a norm depends on its row alone
    for kernel in _kernels():
        for nq in (1, 33):
            got = score_block(queries[:nq], items, "cosine", kernel=kernel, item_norms=norms)
            assert got.dtype == np.float32 and np.array_equal(got, want[:nq]), (kernel.name, nq)
            assert np.array_equal(score_block(queries[:nq], items, "cosine", kernel=kernel), want[:nq])
            fresh = top_k(queries[:nq], items, 25, metric="cosine", kernel=kernel, block_rows=97)
            kept = top_k(
                queries[:nq], items, 25, metric="cosine", kernel=kernel, block_rows=97, item_norms=norms
            )
            order = np.argsort(-want[:nq], axis=1, kind="stable")[:, :25]
            for r in range(nq):
                assert np.array_equal(kept.positions[r], order[r]), (kernel.name, r)
                assert np.array_equal(kept.scores[r], want[r, order[r]])
                assert np.array_equal(fresh.positions[r], kept.positions[r])
                assert np.array_equal(fresh.scores[r], kept.scores[r])
    assert not want[:, [0, 123, 699]].any() and not want[2].any()  # zero rows and the zero query score 0
    assert np.array_equal(want[5, [300, 309, 400, 650]], np.full(4, want[5, 7]))  # the planted ties held


def test_item_norms_are_refused_where_they_do_not_fit() -> None:
    items, queries = _cosine_data(16)
    with pytest.raises(ValueError):
        top_k(queries, items, 3, metric="cosine", kernel=NUMPY, item_norms=row_norms(items[:-1]))
    with pytest.raises(ValueError):
        top_k(queries, items, 3, metric="negative_cosine", kernel=NUMPY, item_norms=row_norms(items))
