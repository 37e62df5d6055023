"""The int8 profile's fidelity contract on the legacy fixtures (docs/precision.md): every vector's cosine to
the original code's (the goldens, float32) is at least 0.999, through the fused and the plain graph; int8
vectors do not depend on the batch or its padding; images keep the exact float32 projection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.fused_op import FUSED_CELLS
from lnserve.app.runtime.fused_op.loader import fused_op_status
from lnserve.app.runtime.onnx_export import build_graphs
from lnserve.app.runtime.onnx_graph.gemms import SCHEMES
from lnserve.converters.families import family_of
from tests.conftest import LEGACY, OE_MODELS, ST_VARIANTS, golden, inputs
from tests.support.vector_checks import cosines

COSINE_BAR = 0.999  # the bar for every vector
BATCH_TOL = 1e-5  # the fidelity standard for batching and padding, kept in int8 too


@pytest.fixture(params=["fused", "plain"])
def graph(request: pytest.FixtureRequest) -> str:
    if request.param == "fused" and not fused_op_status().library.is_file():
        pytest.skip("fused op not built here (no C++ compiler)")
    return str(request.param)


@pytest.fixture(params=sorted(SCHEMES))
def scheme(request: pytest.FixtureRequest) -> str:
    """Both activation schemes run (exactly) on any CPU: each one's contract is checked here."""
    return str(request.param)


def int8_engine(path: Path, graph: str, scheme: str) -> Engine:
    engine = Engine.open(
        path, backend="onnx", precision="int8", fused_op=graph == "fused", int8_scheme=scheme
    )
    assert engine.backend.int8_scheme == scheme
    assert engine.precision == "int8" and engine.backend.providers[0] == "CPUExecutionProvider"
    m = engine.artifact.manifest
    fusable = bool(set(family_of(m).cells(m)) & set(FUSED_CELLS))
    assert engine.backend.graph == (graph if fusable else "plain")
    return engine


@pytest.mark.parametrize("name", OE_MODELS)
def test_order_embedding_vectors_within_the_bar(
    name: str, graph: str, scheme: str, artifacts: dict[str, Path]
) -> None:
    engine = int8_engine(artifacts[name], graph, scheme)
    gold = golden(name)
    caps = inputs()["order_embedding"]["captions"]
    for normalize, key in ((True, "sent_emb"), (False, "sent_hidden_raw")):
        got = engine.encode_sentences(caps, pretokenized=True, normalize=normalize)
        assert np.isfinite(got).all()
        assert cosines(got, gold[key]).min() >= COSINE_BAR, name
        assert not np.array_equal(got, gold[key].astype(np.float32))  # it is int8, not the exact graph


@pytest.mark.parametrize("name", ST_VARIANTS)
def test_skip_thoughts_vectors_within_the_bar(
    name: str, graph: str, scheme: str, artifacts: dict[str, Path]
) -> None:
    engine = int8_engine(artifacts[name], graph, scheme)
    gold = golden(name)
    sents = inputs()["skipthoughts"]["sentences"]
    for eos in (False, True):
        got = engine.encode_sentences(sents, pretokenized=True, eos=eos, normalize=True)
        assert cosines(got, gold[f"feat_norm1_eos{int(eos)}"]).min() >= COSINE_BAR, name


@pytest.mark.parametrize("name", ["oe_order_lngru", "skipthoughts_lngru"])
def test_batching_and_padding_do_not_change_int8_vectors(
    name: str, graph: str, scheme: str, artifacts: dict[str, Path]
) -> None:
    """Scales are per token (inputs) or fixed (states), never per batch: a sentence's vector is the same
    alone, in a batch of 3 or of all, whatever the other rows' lengths."""
    engine = int8_engine(artifacts[name], graph, scheme)
    key = "order_embedding" if name.startswith("oe") else "skipthoughts"
    texts = inputs()[key]["captions" if key == "order_embedding" else "sentences"]
    together = engine.encode_sentences(texts, pretokenized=True)
    by_three = engine.encode_sentences(texts, pretokenized=True, batch_size=3)
    alone = np.concatenate([engine.encode_sentences([t], pretokenized=True) for t in texts])
    assert float(np.abs(together - by_three).max()) <= BATCH_TOL
    assert float(np.abs(together - alone).max()) <= BATCH_TOL


def test_images_keep_the_float32_projection(artifacts: dict[str, Path]) -> None:
    path = artifacts["oe_order_lngru"]
    feats = np.load(LEGACY / inputs()["order_embedding"]["images_file"])
    exact = Engine.open(path, backend="onnx").encode_images(feats)
    assert np.array_equal(Engine.open(path, backend="onnx", precision="int8").encode_images(feats), exact)


@pytest.mark.parametrize("name", ["oe_order_gru", "oe_order_lngru", "skipthoughts_lngru"])
def test_int8_graphs_have_no_float_products(name: str, artifacts: dict[str, Path]) -> None:
    """Every recurrent product is an integer one: no float MatMul or Gemm is left in the encoder graphs."""
    from lnserve.converters.artifact import read_artifact

    graphs = build_graphs(read_artifact(artifacts[name]), check=False, precision="int8")
    for part, model in graphs.items():
        if part == "image":
            continue
        ops = [n.op_type for n in _all_nodes(model.graph)]
        assert "MatMulIntegerToFloat" in ops and not {"MatMul", "Gemm"} & set(ops), (part, ops)


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    nodes = list(graph.node)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes += _all_nodes(attr.g)
    return nodes
