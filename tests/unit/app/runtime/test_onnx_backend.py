"""ONNX export and backend: real ORT sessions, provider reporting, strict mode and broken exports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.errors import OnnxModelError, ProviderUnavailableError
from lnserve.app.runtime.onnx_export import export_onnx
from lnserve.converters.errors import ManifestMismatchError
from lnserve.hashing import sha256_file
from tests.conftest import OE_MODELS, ST_VARIANTS, inputs, run_cli


@pytest.fixture
def exported(artifacts: dict[str, Path], tmp_path: Path) -> Path:
    art = tmp_path / "model"
    shutil.copytree(artifacts["oe_order_lngru"], art)
    export_onnx(art)
    return art


def test_export_records_graphs_in_manifest(exported: Path) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    graphs = manifest["onnx"]["graphs"]
    assert set(graphs) == {"sentence", "image"}
    assert graphs["sentence"]["inputs"] == {"x": ["T", "B", 10], "lengths": ["B"]}
    assert graphs["sentence"]["outputs"] == {"h": ["B", 18]}
    for entry in graphs.values():
        assert manifest["files"][entry["file"]]["sha256"] == sha256_file(exported / entry["file"])


def test_session_reports_cpu_provider(exported: Path) -> None:
    engine = Engine.open(exported, backend="onnx")
    assert engine.backend.providers[0] == "CPUExecutionProvider"
    assert all(s.get_providers()[0] == "CPUExecutionProvider" for s in engine.backend.sessions.values())


@pytest.mark.parametrize("name", OE_MODELS + ST_VARIANTS)
def test_onnx_matches_torch_on_padded_mixed_batches(name: str, artifacts: dict[str, Path]) -> None:
    family = "order_embedding" if name in OE_MODELS else "skipthoughts"
    key = "captions" if name in OE_MODELS else "sentences"
    sents = inputs()[family][key]
    torch_engine = Engine.open(artifacts[name], backend="torch")
    onnx_engine = Engine.open(artifacts[name], backend="onnx")
    for batch_size in (1, 5, 64):
        a = torch_engine.encode_sentences(sents, pretokenized=True, batch_size=batch_size, eos=True)
        b = onnx_engine.encode_sentences(sents, pretokenized=True, batch_size=batch_size, eos=True)
        assert np.abs(a - b).max() <= 1e-5


def test_strict_mode_without_cuda_is_a_clear_error(exported: Path) -> None:
    from lnserve.app.runtime.onnx_backend import cuda_device_present

    if cuda_device_present():
        pytest.skip("a GPU is visible here")
    with pytest.raises(ProviderUnavailableError, match="strict mode"):
        Engine.open(exported, backend="onnx", providers=["CUDAExecutionProvider"], strict=True)
    proc = run_cli("info", str(exported), "--provider", "CUDAExecutionProvider", "--strict")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("lnserve: error [provider_unavailable]")


def test_missing_onnx_file(exported: Path) -> None:
    (exported / "onnx" / "sentence.onnx").unlink()
    with pytest.raises(ManifestMismatchError, match=r"onnx/sentence\.onnx .*missing"):
        Engine.open(exported, backend="onnx")


def _rewrite(exported: Path, mutate: object) -> None:
    path = exported / "manifest.json"
    manifest = json.loads(path.read_text())
    mutate(manifest)  # type: ignore[operator]
    path.write_text(json.dumps(manifest))


def test_corrupt_onnx_file_with_consistent_manifest(exported: Path) -> None:
    graph = exported / "onnx" / "sentence.onnx"
    graph.write_bytes(b"not a protobuf" * 10)

    def fix_hash(m: dict) -> None:
        m["files"]["onnx/sentence.onnx"] = {"sha256": sha256_file(graph), "bytes": graph.stat().st_size}

    _rewrite(exported, fix_hash)
    with pytest.raises(OnnxModelError, match="cannot load the ONNX graph for 'sentence'"):
        Engine.open(exported, backend="onnx")
    proc = run_cli("info", str(exported))
    assert proc.returncode == 2 and "[onnx_model_invalid]" in proc.stderr and "Traceback" not in proc.stderr


def test_export_from_a_newer_version_is_refused(exported: Path) -> None:
    _rewrite(exported, lambda m: m["onnx"].update(export_format=99))
    with pytest.raises(OnnxModelError, match="newer than this lnserve reads"):
        Engine.open(exported, backend="onnx")


@pytest.mark.gpu
def test_cuda_provider_parity(exported: Path) -> None:
    from lnserve.app.runtime.onnx_backend import cuda_device_present

    if not cuda_device_present():
        pytest.skip("no CUDA device")
    gpu = Engine.open(exported, backend="onnx", providers=["CUDAExecutionProvider"], strict=True)
    cpu = Engine.open(exported, backend="onnx", providers=["CPUExecutionProvider"])
    caps = inputs()["order_embedding"]["captions"]
    assert gpu.backend.providers[0] == "CUDAExecutionProvider"
    diff = np.abs(
        gpu.encode_sentences(caps, pretokenized=True) - cpu.encode_sentences(caps, pretokenized=True)
    )
    assert diff.max() <= 1e-5


@pytest.mark.parametrize("name", ("oe_order_lngru", "oe_order_rlngru", "skipthoughts_gru"))
def test_fp16_profile_keeps_norm_statistics_in_fp32(name: str, artifacts: dict[str, Path]) -> None:
    """fp16 is a separate profile (for GPUs): float32 I/O, norms with float32 statistics, small drift."""
    from lnserve.app.runtime.onnx_export import build_fp16_graphs
    from lnserve.converters.artifact import read_artifact

    for model in build_fp16_graphs(read_artifact(artifacts[name])).values():
        assert model.graph.input[0].type.tensor_type.elem_type == 1  # float32 in
        assert model.graph.output[0].type.tensor_type.elem_type == 1  # float32 out
        nodes = list(model.graph.node) + [
            sub for n in model.graph.node for a in n.attribute if a.g is not None for sub in a.g.node
        ]
        for node in nodes:
            if node.op_type in ("LayerNormalization", "RMSNormalization"):
                stash = [a.i for a in node.attribute if a.name == "stash_type"]
                assert stash in ([], [1])  # default 1: statistics in float32
    family = "order_embedding" if name.startswith("oe") else "skipthoughts"
    sents = inputs()[family]["captions" if family == "order_embedding" else "sentences"]
    fp32 = Engine.open(artifacts[name], backend="onnx").encode_sentences(sents, pretokenized=True)
    fp16 = Engine.open(artifacts[name], backend="onnx", precision="fp16")
    assert fp16.backend.precision == "fp16"
    drift = float(np.abs(fp16.encode_sentences(sents, pretokenized=True) - fp32).max())
    assert 0 < drift < 5e-3, drift


def test_serving_builds_recurrent_graphs_without_the_onnx_checker(
    artifacts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start the in-memory graphs go straight to onnxruntime, which validates them; the checker would
    re-serialise every weight (~0.2 s of CPU per start at skip-thoughts' published size)."""
    import onnx

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("onnx.checker ran while building a session")

    monkeypatch.setattr(onnx.checker, "check_model", refuse)
    engine = Engine.open(artifacts["skipthoughts_lngru"], backend="onnx")
    assert set(engine.backend.sessions) == {"uni", "bi_fwd", "bi_bwd"}
    vectors = engine.encode_sentences(["a dog sitting on a table"])
    assert vectors.shape == (1, engine.output_dim) and np.isfinite(vectors).all()
