"""The fused LN-GRU step custom op: parity with the plain graph on real onnxruntime sessions, the fallbacks
(library missing, broken, turned off), exports staying standard ONNX, and the optional build step."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.fused_op import DOMAIN, FUSED_CELLS, LN_OP, RMS_OP
from lnserve.app.runtime.fused_op.loader import code_path, fused_op_status, random_cell_weights
from lnserve.app.runtime.onnx_backend import OnnxBackend
from lnserve.app.runtime.onnx_export import export_onnx
from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph
from lnserve.converters.artifact import read_artifact
from tests.support.fused_ops import encode_captions, one_node_model, padded_batch, saturating_case, session

ROOT = Path(__file__).resolve().parents[4]
LIBRARY = fused_op_status().library
# Skipped only where the install had no compiler: a built library that fails its self-check fails here.
needs_library = pytest.mark.skipif(not LIBRARY.is_file(), reason="fused op not built here (no C++ compiler)")
PARITY = 2e-6  # fused vs plain on the same inputs; measured ~2e-7 (float rounding order, exp polynomial)


@needs_library
def test_built_library_passes_its_self_check() -> None:
    status = fused_op_status()
    assert status.available, status.reason


def _run_both(
    cell: str, weights: dict[str, np.ndarray], x: np.ndarray, lengths: np.ndarray
) -> list[np.ndarray]:
    """(plain, fused) outputs of the same cell on the same inputs."""
    outs = []
    for fused in (False, True):
        model = build_recurrent_encoder_graph(cell, weights, fused=fused, check=False)
        outs.append(session(model, custom=fused).run(["h"], {"x": x, "lengths": lengths})[0])
    return outs


@needs_library
@pytest.mark.parametrize("cell", FUSED_CELLS)
@pytest.mark.parametrize(("n_in", "d", "batch"), [(16, 32, 1), (10, 37, 5), (24, 64, 33), (12, 128, 70)])
def test_fused_graph_matches_plain_graph(cell: str, n_in: int, d: int, batch: int) -> None:
    """d = 37 is not a multiple of 4 (the statistics' tail loop); 70 x 128 splits into 3 thread-pool chunks of
    32 rows, the last one short; lengths pad most rows."""
    rng = np.random.default_rng(d + batch)
    weights = random_cell_weights(rng, cell, n_in, d)
    x, lengths = padded_batch(rng, 9, batch, n_in)
    plain, fused = _run_both(cell, weights, x, lengths)
    assert fused.shape == plain.shape == (batch, d)
    assert float(np.abs(fused - plain).max()) <= PARITY


@needs_library
@pytest.mark.parametrize("cell", FUSED_CELLS)
def test_fused_step_saturated_gates_and_non_finite_rows(cell: str) -> None:
    """Large pre-activations saturate sigmoid/tanh exactly like the plain graph; a NaN input row stays NaN
    (the engine then reports the row), and the other rows are untouched."""
    weights, x, lengths = saturating_case(cell)
    plain, fused = _run_both(cell, weights, x, lengths)
    assert np.isnan(plain[1]).all() and np.isnan(fused[1]).all()
    ok = [0, 2, 3]
    assert float(np.abs(fused[ok] - plain[ok]).max()) <= PARITY


@needs_library
def test_fused_step_with_inconsistent_shapes_returns_nan_not_garbage() -> None:
    """The op cannot raise through the C ABI: inputs of the wrong width give a NaN output."""
    b, d = 2, 8
    shapes = {"hu": [b, 3 * d], "a": [b, d], "c": [b, d], "h": [b, d]}  # a is too narrow
    inits = [
        helper.make_tensor("s_ru", TensorProto.FLOAT, [2 * d], np.ones(2 * d)),
        helper.make_tensor("s_c", TensorProto.FLOAT, [d], np.ones(d)),
        helper.make_tensor("b_c", TensorProto.FLOAT, [d], np.zeros(d)),
    ]
    node = helper.make_node(LN_OP, [*shapes, "s_ru", "s_c", "b_c"], ["y"], domain=DOMAIN)
    graph_inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in shapes.items()]
    model = one_node_model(node, graph_inputs, inits)
    feeds = {k: np.ones(s, np.float32) for k, s in shapes.items()}
    (y,) = session(model, custom=True).run(["y"], feeds)
    assert y.shape == (b, d) and np.isnan(y).all()


@needs_library
@pytest.mark.parametrize("cell", FUSED_CELLS)
def test_fused_scan_body_is_one_joint_gemm_and_one_node(cell: str) -> None:
    """One recurrent GEMM h @ [U_ru | U_c] a step, its weight stored once (no per-gate copies)."""
    n_in, d = 8, 16
    weights = random_cell_weights(np.random.default_rng(0), cell, n_in, d)
    model = build_recurrent_encoder_graph(cell, weights, fused=True, check=False)
    (scan,) = [n for n in model.graph.node if n.op_type == "Scan"]
    body = helper.get_attribute_value(scan.attribute[0])
    assert [n.op_type for n in body.node] == ["MatMul", LN_OP if cell == "lngru" else RMS_OP, "Identity"]
    assert {o.domain: o.version for o in model.opset_import} == {"": 18, DOMAIN: 1}
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    joint = inits[body.node[0].input[1]]
    assert joint.shape == (d, 3 * d) and not {"U_ru", "U_c"} & set(inits)
    assert np.array_equal(joint, weights["weight_hh"].T)  # [U_ru | U_c] is the PyTorch weight transposed


@needs_library
def test_code_path_names_the_clone_this_cpu_runs() -> None:
    """The clone GCC's resolver picks: AVX-512 only where the CPU has it (any x86-64 CPU passes)."""
    path = code_path(LIBRARY)
    known = (
        "x86-64-v4 (AVX-512)",
        "x86-64-v3 (AVX2, FMA)",
        "x86-64 baseline (SSE2)",
        "portable (no target clones)",
    )
    assert path in known
    cpuinfo = Path("/proc/cpuinfo")
    flags = set()
    if cpuinfo.is_file():
        line = next((x for x in cpuinfo.read_text().splitlines() if x.startswith("flags")), "flags:")
        flags = set(line.split(":", 1)[1].split())
    if path.startswith("x86-64-v4"):
        assert {"avx512f", "avx512bw", "avx512vl"} <= flags
    if path.startswith("x86-64-v3"):
        assert {"avx2", "fma"} <= flags


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    nodes = []
    for node in graph.node:
        nodes.append(node)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes += _all_nodes(attr.g)
    return nodes


@needs_library
def test_export_stays_standard_onnx_and_is_served_as_exported(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    art = tmp_path / "model"
    shutil.copytree(artifacts["oe_order_rlngru"], art)
    export_onnx(art)
    exported = onnx.load(str(art / "onnx" / "sentence.onnx"))
    assert {n.domain for n in _all_nodes(exported.graph)} == {""}
    assert [o.domain for o in exported.opset_import] == [""]
    onnx.checker.check_model(exported)
    engine = Engine.open(art, backend="onnx")  # an export is served as exported: plain, and says so
    assert engine.backend.graph == "plain" and "export" in engine.backend.graph_note
    built = Engine.open(art, backend="onnx", form="scan")  # the form matches the export: still the export
    assert built.backend.graph == "plain"


@needs_library
@pytest.mark.parametrize("name", ["oe_order_lngru", "oe_order_rlngru"])
def test_backend_serves_fused_and_opt_out_serves_plain(name: str, artifacts: dict[str, Path]) -> None:
    fused = Engine.open(artifacts[name], backend="onnx")
    plain = Engine.open(artifacts[name], backend="onnx", fused_op=False)
    assert (fused.backend.graph, fused.backend.graph_note) == ("fused", "")
    assert plain.backend.graph == "plain" and "LNSERVE_FUSED_OP=0" in plain.backend.graph_note
    assert float(np.abs(encode_captions(fused) - encode_captions(plain)).max()) <= 1e-6


def test_missing_library_falls_back_to_plain_and_says_why(
    artifacts: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    artifact = read_artifact(artifacts["oe_order_lngru"])
    backend = OnnxBackend(artifact, fused_library=tmp_path / "_lngru_step.so")
    assert backend.graph == "plain"
    assert "was not built" in backend.graph_note
    assert "onnx graph: plain" in caplog.text
    reference = Engine.open(artifacts["oe_order_lngru"], backend="onnx", fused_op=False)
    assert np.array_equal(encode_captions(Engine(artifact, backend)), encode_captions(reference))


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler here")
def test_library_from_an_older_source_is_refused_as_such(tmp_path: Path) -> None:
    """A library built before the joint-GEMM step (no code-path query) would reject today's graphs."""
    source = tmp_path / "old.cc"
    source.write_text('extern "C" void* RegisterCustomOps(void*, const void*) { return nullptr; }\n')
    old = tmp_path / "_lngru_step.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(old)], check=True, timeout=120)
    status = fused_op_status(old)
    assert not status.available and "older lngru_step.cc" in status.reason


def test_broken_library_falls_back_to_plain(artifacts: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "_lngru_step.so"
    broken.write_bytes(b"\x7fELF not really a shared library")
    status = fused_op_status(broken)
    assert not status.available and "does not load" in status.reason
    backend = OnnxBackend(read_artifact(artifacts["oe_order_lngru"]), fused_library=broken)
    assert backend.graph == "plain" and "does not load" in backend.graph_note


def test_cells_without_norms_keep_the_plain_graph_silently(artifacts: dict[str, Path]) -> None:
    engine = Engine.open(artifacts["oe_order_gru"], backend="onnx")
    assert (engine.backend.graph, engine.backend.graph_note) == ("plain", "")
    assert engine.backend.fused_forms == {}
    with pytest.raises(ValueError, match="fused step is for cells"):
        weights = random_cell_weights(np.random.default_rng(0), "gru", 4, 4)
        build_recurrent_encoder_graph("gru", weights, fused=True)


def test_fp16_profile_keeps_the_plain_graph(artifacts: dict[str, Path]) -> None:
    engine = Engine.open(artifacts["oe_order_lngru"], backend="onnx", precision="fp16")
    assert engine.backend.graph == "plain" and "fp32" in engine.backend.graph_note


def _build_ext(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "setup.py",
            "build_ext",
            "--build-lib",
            str(tmp_path / "lib"),
            "--build-temp",
            str(tmp_path / "tmp"),
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _built(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "lib").rglob("_lngru_step*.so"))


def test_build_step_without_a_compiler_reports_and_succeeds(tmp_path: Path) -> None:
    """What ``pip install`` runs for the extension: with no compiler it fails softly and installs the rest."""
    missing = "/nonexistent/c++"
    done = _build_ext(tmp_path, {"CC": missing, "CXX": missing, "LDSHARED": f"{missing} -shared"})
    assert done.returncode == 0, done.stderr
    assert _built(tmp_path) == []
    log = done.stdout + done.stderr
    assert "lngru_step" in log and "failed" in log.lower()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler here")
def test_build_step_with_a_compiler_builds_a_loadable_library(tmp_path: Path) -> None:
    done = _build_ext(tmp_path, {})
    assert done.returncode == 0, done.stderr
    (library,) = _built(tmp_path)
    status = fused_op_status(library)
    assert status.available, status.reason
