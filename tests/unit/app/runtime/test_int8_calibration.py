"""int8 calibration (``runtime.calibration``, ``converters.int8_calibration``): the peaks are each state
feature's largest ``|h|`` over the valid steps of real sentences (checked against the encoder's own
prefixes, padding never counted), they change int8 vectors and the int8 pin only, a calibration of ones is
the uncalibrated graph bit for bit, and a crafted peaks file or section is refused however it is made."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from safetensors.numpy import save

from lnserve.app.runtime.calibration import calibrate, measure_state_peaks
from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.fused_op import FUSED_CELLS
from lnserve.app.runtime.fused_op.loader import fused_op_status, random_cell_weights
from lnserve.app.runtime.onnx_backend import session_options
from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph
from lnserve.app.runtime.precisions import IDENTITY, calibration_of, describe_identity, one_profile
from lnserve.converters.artifact import MANIFEST, add_files, model_identity, read_artifact
from lnserve.converters.errors import ManifestMismatchError
from lnserve.converters.int8_calibration import PEAK_FLOOR, SECTION, calibration_tag, peaks_file_name
from tests.conftest import inputs
from tests.support.vector_checks import cosines

OE, ST = "oe_order_lngru", "skipthoughts_lngru"


def sentences(name: str) -> list[str]:
    return inputs()["order_embedding"]["captions"] if name == OE else inputs()["skipthoughts"]["sentences"]


@pytest.fixture
def copy_of(artifacts: dict[str, Path], tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        return Path(shutil.copytree(artifacts[name], tmp_path / name))

    return copy


def prefix_states(engine: Engine, texts: list[str]) -> dict[str, np.ndarray]:
    """Every state of every sentence, one encoder call per prefix (and per suffix for bi-skip's backward
    direction, which reads the sentence reversed): an independent way to the states a trace keeps."""
    seqs = engine.token_ids(texts, pretokenized=False, eos=engine.eos_for(None))
    prefixes = [s[:t] for s in seqs for t in range(1, len(s) + 1)]
    suffixes = [s[-t:] for s in seqs for t in range(1, len(s) + 1)]
    ahead = engine.encode_ids(prefixes, normalize=False)
    if not engine.family.stacked:
        return {"sentence": ahead}
    m = engine.artifact.manifest
    d_uni, d_bi = m["parts"]["uni"]["dim"], m["parts"]["bi"]["dim"]
    back = engine.encode_ids(suffixes, normalize=False)
    return {
        "uni": ahead[:, :d_uni],
        "bi_fwd": ahead[:, d_uni : d_uni + d_bi],
        "bi_bwd": back[:, d_uni + d_bi :],
    }


@pytest.mark.parametrize("name", [OE, ST])
def test_peaks_are_the_largest_state_over_valid_steps(name: str, artifacts: dict[str, Path]) -> None:
    texts = sentences(name)  # of different lengths: the shorter ones are padded in their batch
    artifact = read_artifact(artifacts[name])
    peaks = measure_state_peaks(artifact, texts)
    states = prefix_states(Engine.open(artifacts[name]), texts)
    assert set(peaks) == set(states)
    for part, every in states.items():
        want = np.clip(np.abs(every).max(axis=0), PEAK_FLOOR, 1.0)
        assert peaks[part].dtype == np.float32 and peaks[part].shape == want.shape
        np.testing.assert_allclose(peaks[part], want, rtol=0, atol=1e-5, err_msg=part)
        assert (peaks[part] < 1.0).any()  # real states do not all reach 1: there is something to gain


CELLS = ["gru", "lngru", "rlngru", "lstm", "lnlstm", "rlnlstm"]


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("cell", CELLS)
def test_peaks_of_one_are_the_uncalibrated_graph(cell: str, fused: bool) -> None:
    """h / 1 clipped to [-1, 1] is h (|h| <= 1), and U * 1 is U: the same codes, the same floats."""
    if fused and (cell not in FUSED_CELLS or not fused_op_status(None).available):
        pytest.skip("the fused step is for lngru / rlngru, where its library is built")
    if cell.endswith("lstm"):
        pytest.importorskip("torch")
        from lnserve.models.cells import make_cell  # lstm weights come from the cells themselves

        module = make_cell(cell, 8, 16)
        weights = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    else:
        weights = random_cell_weights(np.random.default_rng(0), cell, 8, 16)
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (7, 5, 8)).astype(np.float32)
    lengths = np.array([7, 3, 1, 5, 7], np.int64)
    outs = []
    for peaks in (None, np.ones(16, np.float32)):
        model = build_recurrent_encoder_graph(
            cell, weights, precision="int8", state_peaks=peaks, fused=fused, check=False
        )
        options = session_options(1)
        if fused:
            from lnserve.app.runtime.fused_op.loader import register

            register(options, fused_op_status(None).library)
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        outs.append(session.run(["h"], {"x": x, "lengths": lengths})[0])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_calibration_changes_int8_vectors_and_the_int8_pin_only(copy_of: Callable[[str], Path]) -> None:
    path = copy_of(OE)
    texts = sentences(OE)
    before = {p: Engine.open(path, precision=p) for p in ("fp32", "int8")}
    vectors = {p: e.encode_sentences(texts) for p, e in before.items()}
    refs = {p: e.model_ref() for p, e in before.items()}
    section = calibrate(path, texts, texts_name="captions.txt", texts_sha256="ab" * 32)

    assert section["size"] == len(texts) and section["texts"] == "captions.txt"
    manifest = read_artifact(path).manifest
    assert manifest[SECTION] == section and section["file"] in manifest["files"]
    assert (path / section["file"]).is_file()
    assert model_identity(manifest) == refs["fp32"].identity  # fp32 galleries stay valid
    after = {p: Engine.open(path, precision=p) for p in ("fp32", "int8")}
    np.testing.assert_array_equal(after["fp32"].encode_sentences(texts), vectors["fp32"])
    int8 = after["int8"].encode_sentences(texts)
    assert not np.array_equal(int8, vectors["int8"])  # the calibrated graph ran
    assert cosines(int8, vectors["fp32"]).min() >= 0.999

    ref = after["int8"].model_ref()
    tag = manifest["files"][section["file"]]["sha256"][:16]
    assert calibration_tag(manifest) == tag and section["file"] == f"int8/state_peaks-{tag}.safetensors"
    assert ref.identity == refs["int8"].identity
    assert (
        ref.identity_for("captions") == f"{ref.identity}:int8@{tag}" != refs["int8"].identity_for("captions")
    )
    assert IDENTITY.fullmatch(ref.identity_for("captions"))
    assert ref.identity_for("images") == refs["int8"].identity_for("images") == ref.identity  # float32 images
    assert after["fp32"].model_ref().identity_for("captions") == ref.identity
    assert calibration_of(ref.identity_for("captions")) == tag
    assert f"calibration {tag[:8]}" in describe_identity(ref.identity_for("captions"))
    # int8 captions of this calibration with float32 images: one profile; with another calibration's: not
    images = ("images", ref.identity)
    assert one_profile(("captions", ref.identity_for("captions")), images)
    assert not one_profile(("captions", ref.identity_for("captions")), ("captions", f"{ref.identity}:int8"))


# -- crafted calibrations ---------------------------------------------------------------------------------
def _store(path: Path, data: bytes, name: str | None = None, **section: Any) -> None:
    """Store ``data`` as the artifact's peaks file, under its own name unless given another (listed with its
    true sha256, so the file check passes and only the calibration's own checks stand between it and the
    graph), and set the section naming it."""
    name = name or peaks_file_name(data)
    add_files(path, read_artifact(path).manifest, [(name, data)], **{SECTION: {"file": name, **section}})


def _write(path: Path, peaks: dict[str, np.ndarray]) -> None:
    _store(path, save(peaks))


def _unlisted(path: Path) -> None:
    """The section names a peaks file the manifest does not list (the file is there)."""
    data = save({"sentence": np.ones(_d(path), np.float32)})
    (path / "int8").mkdir()
    (path / peaks_file_name(data)).write_bytes(data)
    add_files(path, read_artifact(path).manifest, [], **{SECTION: {"file": peaks_file_name(data)}})


def _d(path: Path) -> int:
    return int(read_artifact(path).manifest["dims"]["dim"])


CRAFTED: dict[str, Callable[[Path], None]] = {
    "other part": lambda p: _write(p, {"encoder": np.ones(_d(p), np.float32)}),
    "extra part": lambda p: _write(
        p, {"sentence": np.ones(_d(p), np.float32), "uni": np.ones(_d(p), np.float32)}
    ),
    "short": lambda p: _write(p, {"sentence": np.ones(_d(p) - 1, np.float32)}),
    "matrix": lambda p: _write(p, {"sentence": np.ones((_d(p), 1), np.float32)}),
    "float64": lambda p: _write(p, {"sentence": np.ones(_d(p), np.float64)}),
    "nan": lambda p: _write(p, {"sentence": np.full(_d(p), np.nan, np.float32)}),
    "infinite": lambda p: _write(p, {"sentence": np.full(_d(p), np.inf, np.float32)}),
    "zero": lambda p: _write(p, {"sentence": np.zeros(_d(p), np.float32)}),
    "tiny": lambda p: _write(p, {"sentence": np.full(_d(p), 1e-30, np.float32)}),
    "negative": lambda p: _write(p, {"sentence": -np.ones(_d(p), np.float32)}),
    "above one": lambda p: _write(p, {"sentence": np.full(_d(p), 1.5, np.float32)}),
    "not listed": _unlisted,
    "section names another file": lambda p: add_files(
        p, read_artifact(p).manifest, [], **{SECTION: {"file": "weights.safetensors"}}
    ),
    "a name outside int8/": lambda p: _store(p, save({"sentence": np.ones(_d(p), np.float32)}), "peaks.bin"),
    "a tag that is not its sha256": lambda p: _store(
        p, save({"sentence": np.ones(_d(p), np.float32)}), "int8/state_peaks-0123456789abcdef.safetensors"
    ),
    "not safetensors": lambda p: _store(p, b"\x80\x04K\x01."),
}


@pytest.mark.parametrize("how", list(CRAFTED))
def test_a_crafted_calibration_is_refused(how: str, copy_of: Callable[[str], Path]) -> None:
    path = copy_of(OE)
    CRAFTED[how](path)
    with pytest.raises(ManifestMismatchError) as info:
        Engine.open(path, precision="int8")
    assert info.value.code == "manifest_mismatch"
    assert str(path) in str(info.value) or MANIFEST in str(info.value), str(info.value)
    # the exact profile does not read the calibration: fp32 serving is untouched by it
    assert Engine.open(path).encode_sentences(sentences(OE)[:2]).shape[0] == 2


def test_a_peak_at_the_floor_and_at_one_is_accepted(copy_of: Callable[[str], Path]) -> None:
    path = copy_of(OE)
    peaks = np.full(_d(path), PEAK_FLOOR, np.float32)
    peaks[::2] = 1.0
    _write(path, {"sentence": peaks})
    got = Engine.open(path, precision="int8").encode_sentences(sentences(OE))
    assert np.isfinite(got).all()
