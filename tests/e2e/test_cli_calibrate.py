"""``lnserve calibrate`` through the real CLI (subprocesses): it records its calibration set in the manifest,
changes int8 vectors and the int8 gallery pin and nothing else (fp32 vectors bit for bit, fp32 galleries),
``info`` shows it, and bad input (a missing or blank text file, no artifact, a crafted peaks file) is one
line and exit 2 with the artifact left as it was; a real int8 server takes a calibration at its reload."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from safetensors.numpy import save

from lnserve.converters.artifact import add_files, read_artifact
from lnserve.converters.int8_calibration import PEAKS_NAME, SECTION, calibration_tag, peaks_file_name
from tests.conftest import golden, inputs, run_cli
from tests.e2e.server import start_server
from tests.support.vector_checks import cosines, one_error_line

MODEL = "oe_order_lngru"
MODEL_NAME = MODEL  # the name its manifest gives it: what the server serves it as
KEY = "calibrate-test-key"


def crafted(model: Path, peaks: dict[str, np.ndarray]) -> None:
    """A peaks file written as a hostile artifact would have it: listed with its true sha256 and named by the
    section, so that only the calibration's own checks stand between it and the graph."""
    data = save(peaks)
    name = peaks_file_name(data)
    add_files(model, read_artifact(model).manifest, [(name, data)], **{SECTION: {"file": name}})


@pytest.fixture
def model(artifacts: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(artifacts[MODEL], tmp_path / "model"))


@pytest.fixture
def captions(tmp_path: Path) -> Path:
    path = tmp_path / "captions.txt"
    path.write_text("\n".join(inputs()["order_embedding"]["captions"]) + "\n", encoding="utf-8")
    return path


def encode(model: Path, captions: Path, out: Path, *precision: str) -> np.ndarray:
    args = ["encode", str(model), "--input", str(captions), "--output", str(out), "--pretokenized"]
    run_cli(*args, *precision, check=True)
    return np.load(out)


def test_calibrate_changes_int8_and_its_pin_only(model: Path, captions: Path, tmp_path: Path) -> None:
    before = {p: encode(model, captions, tmp_path / f"{p}.npy", "--precision", p) for p in ("fp32", "int8")}
    gdir = tmp_path / "galleries"
    build = [
        "--model",
        str(model),
        "--captions",
        str(captions),
        "--pretokenized",
        "--galleries-dir",
        str(gdir),
    ]
    for p in ("fp32", "int8"):
        run_cli("gallery", "build", f"caps-{p}", *build, "--precision", p, check=True)

    texts = tmp_path / "calibration set.txt"  # a name with a space: recorded as given
    texts.write_text("\n\n".join(inputs()["order_embedding"]["captions"]) + "\n\n", encoding="utf-8")
    proc = run_cli("calibrate", str(model), "--texts", str(texts), "--size", "3", check=True)
    assert ": int8 state peaks from 3 sentences of calibration set.txt" in proc.stdout

    assert "calibrating on 3 sentences (fewer than 1000)" in proc.stderr  # few: a warning, and they clip
    section = json.loads((model / "manifest.json").read_text(encoding="utf-8"))[SECTION]
    assert section["texts"] == "calibration set.txt" and section["size"] == 3
    assert section["texts_sha256"] == hashlib.sha256(texts.read_bytes()).hexdigest()
    first = section["file"]
    assert PEAKS_NAME.fullmatch(first) and f"{model / first}: " in proc.stdout
    # calibrating again replaces it: every non-blank line of the file this time (blank lines are not text);
    # the first peaks file is gone, the new one listed and named by its sha256
    proc = run_cli("calibrate", str(model), "--texts", str(texts), check=True)
    assert "from 40 sentences" in proc.stdout
    manifest = read_artifact(model).manifest
    now = manifest[SECTION]["file"]
    assert now != first and not (model / first).exists() and first not in manifest["files"]
    assert sorted(p.name for p in (model / "int8").iterdir()) == [now.removeprefix("int8/")]

    fp32 = encode(model, captions, tmp_path / "fp32-after.npy", "--precision", "fp32")
    np.testing.assert_array_equal(fp32, before["fp32"])
    int8 = encode(model, captions, tmp_path / "int8-after.npy", "--precision", "int8")
    assert not np.array_equal(int8, before["int8"])
    assert cosines(int8, golden(MODEL)["sent_emb"]).min() >= 0.999

    info = json.loads(run_cli("info", str(model), "--precision", "int8", "--json", check=True).stdout)
    assert info["int8_calibration"] == "40 sentences of 'calibration set.txt'"

    # the fp32 gallery still takes adds; the int8 one was embedded with the uncalibrated graph: refused
    run_cli("gallery", "build", "caps-fp32", *build, "--append", check=True)
    refused = run_cli("gallery", "build", "caps-int8", *build, "--append", "--precision", "int8")
    line = one_error_line(refused, "gallery_mismatch")
    assert "calibration" in line, line


def test_bad_input_is_one_line_and_leaves_the_artifact(model: Path, tmp_path: Path) -> None:
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n", encoding="utf-8")
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"a red circle\n\xff\xfe\n")
    good = tmp_path / "good.txt"
    good.write_text("a red circle\n", encoding="utf-8")
    manifest = (model / "manifest.json").read_bytes()
    cases = {
        "missing": (["calibrate", str(model), "--texts", str(tmp_path / "nope.txt")], "invalid_input"),
        "blank lines only": (["calibrate", str(model), "--texts", str(blank)], "invalid_input"),
        "empty": (["calibrate", str(model), "--texts", str(empty)], "invalid_input"),
        "not utf-8": (["calibrate", str(model), "--texts", str(binary)], "invalid_input"),
        "a directory": (["calibrate", str(model), "--texts", str(tmp_path)], "invalid_input"),
        "no artifact": (["calibrate", str(tmp_path), "--texts", str(good)], "artifact_error"),
    }
    for name, (args, code) in cases.items():
        line = one_error_line(run_cli(*args), code)
        assert len(line) < 400, (name, line)
    assert (model / "manifest.json").read_bytes() == manifest and not (model / "int8").exists()
    usage = run_cli("calibrate", str(model), "--texts", str(blank), "--size", "0")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_a_crafted_peaks_file_is_one_line(model: Path, captions: Path, tmp_path: Path) -> None:
    d = int(read_artifact(model).manifest["dims"]["dim"])
    peaks = np.full(d, 1e-30, np.float32)  # every state would saturate
    crafted(model, {"sentence": peaks})
    args = [
        "encode",
        str(model),
        "--input",
        str(captions),
        "--output",
        str(tmp_path / "o.npy"),
        "--pretokenized",
    ]
    line = one_error_line(run_cli(*args, "--precision", "int8"), "manifest_mismatch")
    assert "peaks" in line and "int8/state_peaks-" in line, line
    assert not (tmp_path / "o.npy").exists()
    run_cli(*args, check=True)  # fp32 does not read the calibration


def test_a_server_reloads_a_calibration(model: Path, tmp_path: Path) -> None:
    """A real int8 server: calibrating its model on disk changes nothing until a reload; after the reload it
    encodes with the peaks, its int8 caption gallery made before answers 422 ``gallery_mismatch`` naming the
    calibration, and a caption gallery made now pins it. A reload of a crafted calibration fails with the
    reason and keeps the calibrated model serving."""
    texts = inputs()["order_embedding"]["captions"]
    src = tmp_path / "captions.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    gdir = tmp_path / "galleries"
    env = {"LNSERVE_GALLERIES_DIR": str(gdir), "LNSERVE_API_KEY": KEY}
    server = start_server(tmp_path, "--models", str(model), "--precision", "int8", env=env)
    try:
        with httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {KEY}"}) as c:

            def encode() -> np.ndarray:
                r = c.post("/encode", json={"sentences": texts, "pretokenized": True})
                assert r.status_code == 200, r.text
                return np.asarray(r.json()["vectors"], dtype=np.float32)

            def search(gallery: str) -> httpx.Response:
                return c.post("/retrieve", json={"gallery": gallery, "query": {"text": texts[0]}, "k": 2})

            items = [{"id": f"c{i}", "text": t} for i, t in enumerate(texts[:6])]
            assert c.post("/galleries", json={"name": "before", "kind": "captions"}).status_code == 201
            assert c.post("/galleries/before/items", json={"items": items}).status_code == 200
            plain = encode()

            run_cli("calibrate", str(model), "--texts", str(src), check=True)
            np.testing.assert_array_equal(encode(), plain)  # the loaded graphs serve until a reload
            r = c.post(f"/models/{MODEL_NAME}/reload")
            assert r.status_code == 200, r.text
            calibrated = encode()
            assert not np.array_equal(calibrated, plain)
            assert cosines(calibrated, golden(MODEL)["sent_emb"]).min() >= 0.999

            r = search("before")
            assert r.status_code == 422 and r.json()["error"]["code"] == "gallery_mismatch", r.text
            assert "calibration" in r.json()["error"]["message"], r.text
            tag = calibration_tag(read_artifact(model).manifest)
            assert c.post("/galleries", json={"name": "after", "kind": "captions"}).status_code == 201
            assert c.post("/galleries/after/items", json={"items": items}).status_code == 200
            assert c.get("/galleries/after").json()["model_identity"].endswith(f":int8@{tag}")
            assert search("after").status_code == 200

            # a crafted peaks file on disk: the reload fails with the reason, the calibrated model serves on
            crafted(model, {"sentence": np.zeros(2, "f")})
            r = c.post(f"/models/{MODEL_NAME}/reload")
            assert r.status_code == 422 and r.json()["error"]["code"] == "reload_failed", r.text
            assert "peaks" in r.json()["error"]["message"], r.text
            np.testing.assert_array_equal(encode(), calibrated)
            assert c.get("/health").status_code == 200
    finally:
        server.stop()
    assert "Traceback" not in server.log(), server.log()[-4000:]


def test_a_full_disk_part_way_through_a_recalibration_keeps_the_calibration_in_use(
    model: Path, captions: Path, tmp_path: Path
) -> None:
    """The new peaks file fits, the manifest does not (a file-size limit stands in for the full disk, as in
    test_cli_files): one line, ``storage_full``, and the model loads and encodes at int8 exactly as it did
    with the calibration in use (the new file was written beside it, never over it; the same holds for a
    kill between the two writes)."""
    texts = inputs()["order_embedding"]["captions"]
    first = tmp_path / "first.txt"
    first.write_text("\n".join(texts[:10]) + "\n", encoding="utf-8")
    run_cli("calibrate", str(model), "--texts", str(first), check=True)
    calibrated = encode(model, captions, tmp_path / "before.npy", "--precision", "int8")
    manifest = (model / "manifest.json").read_bytes()
    peaks_bytes = (model / json.loads(manifest)[SECTION]["file"]).stat().st_size
    assert peaks_bytes + 64 < len(manifest)

    again = tmp_path / "again.txt"
    again.write_text("\n".join(texts) + "\n", encoding="utf-8")
    limit = peaks_bytes + 64

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    proc = subprocess.run(
        [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()", "calibrate", str(model),
         "--texts", str(again)],
        capture_output=True, text=True, timeout=300, preexec_fn=small_files,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr  # storage_full: exit 1
    line = proc.stderr.strip().splitlines()[-1]  # after the few-sentences warning
    assert line.startswith("lnserve: error [storage_full]: ") and "manifest.json" in line, line
    assert (model / "manifest.json").read_bytes() == manifest
    np.testing.assert_array_equal(
        encode(model, captions, tmp_path / "after.npy", "--precision", "int8"), calibrated
    )
    run_cli("calibrate", str(model), "--texts", str(again), check=True)  # with room again, it goes through
    assert len(list((model / "int8").iterdir())) == 1  # the file the failed run left is the one it wrote now
