"""The whole-sequence custom op (``LnGruSequence`` / ``RmsGruSequence``): parity with the plain Scan graph on
real onnxruntime sessions, rows that never depend on their batch, and which parts the backend runs with it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.fused_op import (
    DOMAIN,
    FUSED_CELLS,
    LN_SEQUENCE_OP,
    RMS_SEQUENCE_OP,
    SEQUENCE_MAX_D,
    uses_sequence_op,
)
from lnserve.app.runtime.fused_op.loader import fused_op_status, random_cell_weights
from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph
from tests.support.fused_ops import encode_captions, one_node_model, padded_batch, saturating_case, session

LIBRARY = fused_op_status().library
needs_library = pytest.mark.skipif(not LIBRARY.is_file(), reason="fused op not built here (no C++ compiler)")
PARITY = 3e-6  # sequence op vs plain graph on the same inputs; measured <= 1.2e-6 at d <= 256


def _graphs(cell: str, weights: dict[str, np.ndarray]) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    """(plain Scan graph, sequence-op graph) sessions of one cell."""
    plain = build_recurrent_encoder_graph(cell, weights, check=False)
    sequence = build_recurrent_encoder_graph(cell, weights, fused=True, sequence_op=True, check=False)
    return session(plain, custom=False, threads=2), session(sequence, custom=True, threads=2)


def _h(session: ort.InferenceSession, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return session.run(["h"], {"x": x, "lengths": lengths})[0]


@needs_library
@pytest.mark.parametrize("cell", FUSED_CELLS)
@pytest.mark.parametrize(
    ("n_in", "d", "batch"),
    [(16, 32, 1), (10, 37, 5), (32, 64, 12), (24, 64, 70), (12, 128, 33), (40, 256, 9)],
)
def test_sequence_graph_matches_plain_graph(cell: str, n_in: int, d: int, batch: int) -> None:
    """d = 37: 3d = 111 columns, not a multiple of the 16-column register block, and statistics over widths
    that are not multiples of 4; batches of 1 and 5 rows leave the 4-row block a remainder; 70 x 64 splits
    into several thread-pool groups; lengths pad most rows."""
    rng = np.random.default_rng(d + batch)
    weights = random_cell_weights(rng, cell, n_in, d)
    x, lengths = padded_batch(rng, 9, batch, n_in)
    plain, sequence = (_h(s, x, lengths) for s in _graphs(cell, weights))
    assert sequence.shape == plain.shape == (batch, d)
    assert float(np.abs(sequence - plain).max()) <= PARITY


@needs_library
@pytest.mark.parametrize("cell", FUSED_CELLS)
def test_a_row_never_depends_on_its_batch_or_its_padding(cell: str) -> None:
    """Each row runs alone through the op's own GEMM, summed in one fixed order, so its vector is the same
    bits alone, in any batch, at any padded length and on any number of threads."""
    rng = np.random.default_rng(5)
    n_in, d, batch, steps = 20, 48, 23, 11
    _, sequence = _graphs(cell, random_cell_weights(rng, cell, n_in, d))
    x = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    lengths = rng.integers(1, steps + 1, batch).astype(np.int64)
    whole = _h(sequence, x, lengths)
    for i in range(batch):
        alone = _h(sequence, np.ascontiguousarray(x[: lengths[i], i : i + 1]), lengths[i : i + 1])
        assert np.array_equal(alone[0], whole[i]), i
    padded = np.concatenate([x, rng.standard_normal((4, batch, n_in)).astype(np.float32)])
    assert np.array_equal(_h(sequence, padded, lengths), whole)  # padding steps are never read
    weights = random_cell_weights(np.random.default_rng(5), cell, n_in, d)
    one_thread = session(
        build_recurrent_encoder_graph(cell, weights, fused=True, sequence_op=True, check=False),
        custom=True,
        threads=1,
    )
    assert np.array_equal(_h(one_thread, x, lengths), whole)


@needs_library
@pytest.mark.parametrize("cell", FUSED_CELLS)
def test_saturated_gates_and_a_non_finite_row(cell: str) -> None:
    """Large pre-activations saturate like the plain graph; a NaN input stays in its row (the engine then
    reports that row), the other rows are untouched."""
    weights, x, lengths = saturating_case(cell)
    plain, sequence = (_h(s, x, lengths) for s in _graphs(cell, weights))
    assert np.isnan(plain[1]).all() and np.isnan(sequence[1]).all()
    ok = [0, 2, 3]
    assert float(np.abs(sequence[ok] - plain[ok]).max()) <= PARITY


@needs_library
def test_a_non_finite_recurrent_weight_poisons_rows_like_the_plain_graph() -> None:
    """The first step's h U is computed like the plain graph's (h = 0, but 0 * inf is NaN): with an inf in
    U even one-step rows come out NaN (and the engine refuses them), never as a finite vector."""
    rng = np.random.default_rng(4)
    weights = random_cell_weights(rng, "lngru", 6, 8)
    weights["weight_hh"][3, 2] = np.inf
    x = rng.standard_normal((3, 2, 6)).astype(np.float32)
    lengths = np.array([1, 3], np.int64)
    plain, sequence = (_h(s, x, lengths) for s in _graphs("lngru", weights))
    assert np.isnan(plain).all() and np.isnan(sequence).all()


@needs_library
@pytest.mark.parametrize("cell", FUSED_CELLS)
def test_the_sequence_graph_is_one_node(cell: str) -> None:
    """No Scan, no input-side nodes: the whole recurrence is the op, its joint weights stored once."""
    n_in, d = 8, 16
    weights = random_cell_weights(np.random.default_rng(0), cell, n_in, d)
    model = build_recurrent_encoder_graph(cell, weights, fused=True, sequence_op=True, check=False)
    op = LN_SEQUENCE_OP if cell == "lngru" else RMS_SEQUENCE_OP
    assert [(n.op_type, n.domain) for n in model.graph.node] == [(op, DOMAIN), ("Identity", "")]
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert len(inits) == (12 if cell == "lngru" else 9) - 2  # every input but x and lengths
    assert np.array_equal(inits["W"], weights["weight_ih"].T)  # [W_ru | W_c]
    assert np.array_equal(inits["U"], weights["weight_hh"].T)  # [U_ru | U_c]


def test_the_sequence_op_is_only_a_fused_fp32_scan_replacement() -> None:
    weights = random_cell_weights(np.random.default_rng(0), "lngru", 4, 8)
    for bad in (
        {"sequence_op": True},  # not fused
        {"sequence_op": True, "fused": True, "precision": "int8"},
        {"sequence_op": True, "fused": True, "form": "loop"},
        {"sequence_op": True, "fused": True, "every_state": True},
    ):
        with pytest.raises(ValueError, match="sequence op"):
            build_recurrent_encoder_graph("lngru", weights, **bad)  # type: ignore[arg-type]
    assert uses_sequence_op(SEQUENCE_MAX_D, "fp32") and not uses_sequence_op(SEQUENCE_MAX_D + 1, "fp32")
    assert not uses_sequence_op(64, "int8") and not uses_sequence_op(64, "fp32", max_dim=0)


@needs_library
def test_inconsistent_shapes_give_nan_not_garbage() -> None:
    """The op cannot raise through the C ABI: a weight of the wrong shape gives a NaN output."""
    n_in, d, b, steps = 4, 8, 2, 3
    shapes = {"W": [n_in, 3 * d], "b": [3 * d], "s_ih_ru": [2 * d], "s_ih_c": [d]}
    shapes |= {"U": [d, 2 * d], "s_hh_ru": [2 * d], "s_hh_c": [d]}  # U is too narrow
    inits = [helper.make_tensor(k, TensorProto.FLOAT, s, np.ones(s).ravel()) for k, s in shapes.items()]
    node = helper.make_node(RMS_SEQUENCE_OP, ["x", "lengths", *shapes], ["y"], domain=DOMAIN)
    graph_inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, b, n_in]),
        helper.make_tensor_value_info("lengths", TensorProto.INT64, [b]),
    ]
    model = one_node_model(node, graph_inputs, inits)
    feeds = {"x": np.ones((steps, b, n_in), np.float32), "lengths": np.array([3, 1], np.int64)}
    (y,) = session(model, custom=True).run(["y"], feeds)
    assert y.shape == (b, d) and np.isnan(y).all()


@needs_library
@pytest.mark.parametrize("name", ["oe_order_lngru", "oe_order_rlngru"])
def test_backend_runs_small_cells_as_one_op_unless_told_not_to(name: str, artifacts: dict[str, Path]) -> None:
    sequence = Engine.open(artifacts[name], backend="onnx")
    step = Engine.open(artifacts[name], backend="onnx", fused_sequence_max_dim=0)
    int8 = Engine.open(artifacts[name], backend="onnx", precision="int8")
    assert sequence.backend.graph == step.backend.graph == int8.backend.graph == "fused"
    assert sequence.backend.fused_forms == {"sentence": "sequence"}
    assert step.backend.fused_forms == int8.backend.fused_forms == {"sentence": "step"}
    plain = Engine.open(artifacts[name], backend="onnx", fused_op=False)
    assert plain.backend.fused_forms == {}
    assert float(np.abs(encode_captions(sequence) - encode_captions(plain)).max()) <= PARITY
    assert float(np.abs(encode_captions(sequence) - encode_captions(step)).max()) <= PARITY


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler here")
def test_a_library_without_the_sequence_op_is_refused_as_older(tmp_path: Path) -> None:
    """A library built from the step op's sources alone (it has the code-path query, not the op version)
    would reject today's graphs of small cells: it is refused with a reason, and the plain graph runs."""
    source = tmp_path / "old.cc"
    source.write_text(
        'extern "C" void* RegisterCustomOps(void*, const void*) { return nullptr; }\n'
        'extern "C" const char* LnserveFusedStepCodePath() { return "x86-64 baseline (SSE2)"; }\n'
    )
    old = tmp_path / "_lngru_step.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(old)], check=True, timeout=120)
    status = fused_op_status(old)
    assert not status.available and "older lngru_step.cc" in status.reason
