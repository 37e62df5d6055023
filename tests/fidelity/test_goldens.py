"""Every golden array of the public fixtures, reproduced to <= 1e-5 by each backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lnserve.app.runtime.engine import Engine
from tests.conftest import LEGACY, OE_MODELS, ST_VARIANTS, golden, inputs

TOL = 1e-5
BACKENDS = ("torch", "onnx")


def _assert_close(ours: np.ndarray, gold: np.ndarray, what: str) -> None:
    assert ours.shape == gold.shape, f"{what}: shape {ours.shape} != {gold.shape}"
    diff = float(np.abs(ours.astype(np.float64) - gold.astype(np.float64)).max())
    assert diff <= TOL, f"{what}: max |diff| {diff:.3g} > {TOL}"


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("name", OE_MODELS)
def test_order_embedding_goldens(name: str, backend: str, artifacts: dict[str, Path]) -> None:
    engine = Engine.open(artifacts[name], backend=backend)
    gold = golden(name)
    caps = inputs()["order_embedding"]["captions"]
    images = np.load(LEGACY / "order_embedding" / "images.npy")

    sent = engine.encode_sentences(caps, pretokenized=True)
    _assert_close(sent, gold["sent_emb"], "sent_emb")
    one_by_one = np.concatenate([engine.encode_sentences([c], pretokenized=True) for c in caps])
    _assert_close(one_by_one, gold["sent_emb_one_by_one"], "sent_emb_one_by_one")
    _assert_close(
        engine.encode_sentences(caps, pretokenized=True, normalize=False), gold["sent_hidden_raw"], "raw"
    )
    img = engine.encode_images(images)
    _assert_close(img, gold["img_emb"], "img_emb")
    _assert_close(engine.backend.image_projection(images), gold["img_proj_raw"], "img_proj_raw")
    _assert_close(engine.score(sent, img), gold["errs"], "errs")


@pytest.mark.parametrize("name", OE_MODELS)
def test_order_embedding_token_ids(name: str, artifacts: dict[str, Path]) -> None:
    engine = Engine.open(artifacts[name], backend="torch")
    gold = golden(name)
    seqs = engine.token_ids(inputs()["order_embedding"]["captions"], pretokenized=True, eos=True)
    assert [len(s) for s in seqs] == gold["n_steps"].tolist()
    for seq, row in zip(seqs, gold["token_ids"], strict=True):
        assert seq == row[: len(seq)].tolist()


@pytest.mark.parametrize("name", OE_MODELS)
def test_both_scoring_methods(name: str) -> None:
    from lnserve.app.runtime.scoring import error_matrix

    gold = golden(name)
    _assert_close(error_matrix(gold["sent_emb"], gold["img_emb"], "order"), gold["errs_order"], "errs_order")
    _assert_close(
        error_matrix(gold["sent_emb"], gold["img_emb"], "cosine"), gold["errs_cosine"], "errs_cosine"
    )


@pytest.mark.parametrize("variant", ST_VARIANTS)
def test_skip_thoughts_goldens(variant: str, backend: str, artifacts: dict[str, Path]) -> None:
    engine = Engine.open(artifacts[variant], backend=backend)
    gold = golden(variant)
    sents = inputs()["skipthoughts"]["sentences"]
    for norm in (0, 1):
        for eos in (0, 1):
            got = engine.encode_sentences(sents, pretokenized=True, eos=bool(eos), normalize=bool(norm))
            _assert_close(got, gold[f"feat_norm{norm}_eos{eos}"], f"{variant} norm={norm} eos={eos}")
