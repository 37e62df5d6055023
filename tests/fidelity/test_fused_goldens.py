"""The goldens through the fused LN-GRU ops (the onnx backend's default graph where the library is built),
checked to be the fused graph and not a silent fallback: the whole-sequence op (the fixtures' cells are small,
so the default), the step op in a Scan (``LNSERVE_FUSED_SEQUENCE_MAX_DIM=0``), and the plain graph
(``LNSERVE_FUSED_OP=0``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.fused_op import SEQUENCE_MAX_D
from lnserve.app.runtime.fused_op.loader import fused_op_status
from tests.conftest import golden, inputs

TOL = 1e-5
LN_OE = ("oe_order_lngru", "oe_order_rlngru", "oe_order_rms_as_lngru")


def _max_diff(ours: np.ndarray, gold: np.ndarray) -> float:
    assert ours.shape == gold.shape
    return float(np.abs(ours.astype(np.float64) - gold.astype(np.float64)).max())


@pytest.fixture(params=["fused-sequence", "fused-step", "plain"])
def graph(request: pytest.FixtureRequest) -> str:
    if request.param != "plain" and not fused_op_status().library.is_file():
        pytest.skip("fused op not built here (no C++ compiler)")
    return str(request.param)


def _engine(path: Path, graph: str) -> Engine:
    max_dim = 0 if graph == "fused-step" else SEQUENCE_MAX_D
    engine = Engine.open(path, backend="onnx", fused_op=graph != "plain", fused_sequence_max_dim=max_dim)
    assert engine.backend.graph == graph.split("-")[0]
    if graph != "plain":
        assert set(engine.backend.fused_forms.values()) == {graph.split("-")[1]}
    return engine


@pytest.mark.parametrize("name", LN_OE)
def test_order_embedding_goldens(name: str, graph: str, artifacts: dict[str, Path]) -> None:
    engine = _engine(artifacts[name], graph)
    gold = golden(name)
    caps = inputs()["order_embedding"]["captions"]
    assert _max_diff(engine.encode_sentences(caps, pretokenized=True), gold["sent_emb"]) <= TOL
    raw = engine.encode_sentences(caps, pretokenized=True, normalize=False, batch_size=3)
    assert _max_diff(raw, gold["sent_hidden_raw"]) <= TOL
    one_by_one = np.concatenate([engine.encode_sentences([c], pretokenized=True) for c in caps])
    assert _max_diff(one_by_one, gold["sent_emb_one_by_one"]) <= TOL


def test_skip_thoughts_goldens(graph: str, artifacts: dict[str, Path]) -> None:
    engine = _engine(artifacts["skipthoughts_lngru"], graph)
    gold = golden("skipthoughts_lngru")
    sents = inputs()["skipthoughts"]["sentences"]
    for norm in (0, 1):
        for eos in (0, 1):
            got = engine.encode_sentences(sents, pretokenized=True, eos=bool(eos), normalize=bool(norm))
            assert _max_diff(got, gold[f"feat_norm{norm}_eos{eos}"]) <= TOL
