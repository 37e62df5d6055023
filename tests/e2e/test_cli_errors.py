"""Hostile and broken inputs through the real CLI (subprocesses): exit code, one stderr line with the stable
code, no traceback, and nothing written (no output, no staging directory next to it, no marker file)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from tests.conftest import run_cli
from tests.support.broken import (
    OE_DIR,
    copy_oe,
    copy_st,
    hostile_pickle,
    hostile_table,
    npy_bytes,
    rewrite_npz,
    truncated,
)


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def assert_refused(proc: subprocess.CompletedProcess[str], code: str, *, exit_code: int = 2) -> str:
    assert proc.returncode == exit_code, proc.stderr
    # conversion warnings (e.g. the extra keys skip-thoughts files always carry) may precede the error
    lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("lnserve: WARNING: ")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"lnserve: error [{code}]: "), lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "oe"
    write_order_embedding(read_order_embedding(OE_DIR / "oe_order_gru"), out, name="oe")
    return out


# -- convert ------------------------------------------------------------------------------------------
def _hostile_pkl(tmp: Path) -> Path:
    prefix = copy_oe(tmp)
    Path(f"{prefix}.pkl").write_bytes(hostile_pickle(tmp / "ran"))
    return prefix


def _truncated_npz(tmp: Path) -> Path:
    prefix = copy_oe(tmp)
    npz = Path(f"{prefix}.npz")
    npz.write_bytes(truncated(npz.read_bytes()))
    return prefix


def _missing_key(tmp: Path) -> Path:
    prefix = copy_oe(tmp)
    rewrite_npz(Path(f"{prefix}.npz"), encoder_W=None)
    return prefix


def _wrong_shape(tmp: Path) -> Path:
    prefix = copy_oe(tmp)
    rewrite_npz(Path(f"{prefix}.npz"), ff_image_W=np.zeros((21, 16), np.float32))
    return prefix


def _unknown_cell(tmp: Path) -> Path:
    prefix = copy_oe(tmp)
    pkl = Path(f"{prefix}.pkl")
    pkl.write_bytes(pkl.read_bytes().replace(b"S'gru'", b"S'qrnn'"))
    return prefix


@pytest.mark.parametrize(
    ("make", "code", "message"),
    [
        (_hostile_pkl, "unsafe_pickle", "refusing to unpickle global 'os.system'"),
        (_truncated_npz, "corrupt_file", "not a readable .npz archive"),
        (_missing_key, "missing_parameter", "missing parameter(s) encoder_W"),
        (_wrong_shape, "shape_mismatch", "ff_image_W: expected shape (20, 16), found (21, 16)"),
        (_unknown_cell, "unknown_cell_type", "options say encoder='qrnn'"),
    ],
)
def test_convert_order_embedding_refuses(
    make: Callable[[Path], Path], code: str, message: str, tmp_path: Path
) -> None:
    prefix = make(tmp_path)
    before = _snapshot(tmp_path)
    proc = run_cli("convert", "order-embedding", str(prefix), "--out", str(tmp_path / "out" / "model"))
    assert message in assert_refused(proc, code)
    assert _snapshot(tmp_path) == before  # no output dir, no staging dir, no marker file


def _st_args(src: Path, tmp: Path) -> list[str]:
    return [
        "convert",
        "skip-thoughts",
        "--uni",
        str(src / "uni_skip.npz"),
        "--tables",
        str(src),
        "--out",
        str(tmp / "model"),
    ]


def test_convert_skip_thoughts_refuses_a_hostile_table(tmp_path: Path) -> None:
    src = copy_st(tmp_path)
    (src / "utable.npy").write_bytes(hostile_table(tmp_path / "ran"))
    before = _snapshot(tmp_path)
    line = assert_refused(run_cli(*_st_args(src, tmp_path)), "unsafe_pickle")
    assert "utable.npy: refusing to unpickle global 'os.system'" in line
    assert _snapshot(tmp_path) == before and not (tmp_path / "ran").exists()


def test_convert_skip_thoughts_refuses_a_row_mismatch(tmp_path: Path) -> None:
    src = copy_st(tmp_path)
    (src / "dictionary.txt").write_bytes((src / "dictionary.txt").read_bytes() + b"extra\n")
    before = _snapshot(tmp_path)
    line = assert_refused(run_cli(*_st_args(src, tmp_path)), "table_mismatch")
    assert "47 rows but dictionary.txt has 48 lines" in line
    assert _snapshot(tmp_path) == before  # the staging dir with the half-written table is gone


def test_convert_skip_thoughts_refuses_a_dictionary_line_past_its_bound(tmp_path: Path) -> None:
    """dictionary.txt is read within bounds (1 MiB a line, 512 MiB in all), never whole whatever its size."""
    src = copy_st(tmp_path)
    words = (src / "dictionary.txt").read_bytes().split(b"\n")
    words[-2] = b"w" * (2 << 20)  # the last word, 2 MiB long: the row count still matches
    (src / "dictionary.txt").write_bytes(b"\n".join(words))
    before = _snapshot(tmp_path)
    line = assert_refused(run_cli(*_st_args(src, tmp_path)), "corrupt_file")
    assert "dictionary.txt: " in line and "longer than the 1 MiB limit per line" in line, line
    assert _snapshot(tmp_path) == before


def test_convert_refuses_an_unknown_override(tmp_path: Path) -> None:
    proc = run_cli(
        "convert",
        "order-embedding",
        str(OE_DIR / "oe_order_gru"),
        "--out",
        str(tmp_path / "m"),
        "--cell",
        "lnrgu",
    )
    assert "unknown cell type 'lnrgu'" in assert_refused(proc, "unknown_cell_type")
    assert list(tmp_path.iterdir()) == []


# -- encode -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a man\n\xff\xfe riding\n", "not valid UTF-8 (byte 6)"),
        (b"", "input file is empty"),
    ],
)
def test_encode_refuses_bad_text(content: bytes, message: str, model: Path, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(content)
    before = _snapshot(tmp_path)
    proc = run_cli(
        "encode", str(model), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.npy")
    )
    assert message in assert_refused(proc, "invalid_input")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((3, 19), np.float32), "image features must have shape (N, 20), got (3, 19)"),
        (np.zeros((3, 20), np.int64), "must be a 2-d float array, got int64 (3, 20)"),
        (np.zeros(20, np.float32), "must be a 2-d float array, got float32 (20,)"),
    ],
)
def test_encode_refuses_bad_images(array: np.ndarray, message: str, model: Path, tmp_path: Path) -> None:
    (tmp_path / "im.npy").write_bytes(npy_bytes(array))
    before = _snapshot(tmp_path)
    proc = run_cli(
        "encode", str(model), "--images", str(tmp_path / "im.npy"), "--output", str(tmp_path / "o.npy")
    )
    assert message in assert_refused(proc, "invalid_input")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("which", ["both", "neither"])
def test_encode_needs_exactly_one_input(which: str, model: Path, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("a dog\n")
    extra = (
        ["--input", str(tmp_path / "in.txt"), "--images", str(OE_DIR / "images.npy")]
        if which == "both"
        else []
    )
    proc = run_cli("encode", str(model), *extra, "--output", str(tmp_path / "o.npy"))
    assert "give exactly one of --input and --images" in assert_refused(proc, "invalid_input")
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.parametrize(
    ("edit", "code", "message"),
    [
        (lambda m: m["dims"].update(dim=15), "manifest_mismatch", "the manifest implies"),
        (lambda m: m["files"]["vocab.json"].update(sha256="0" * 64), "manifest_mismatch", "sha256 differs"),
        (lambda m: m.update(format_version=99), "artifact_version", "artifact format 99 is newer"),
    ],
)
def test_encode_refuses_a_tampered_artifact(
    edit: Callable[[dict], None], code: str, message: str, model: Path, tmp_path: Path
) -> None:
    art = Path(shutil.copytree(model, tmp_path / "art"))
    manifest = json.loads((art / "manifest.json").read_text())
    edit(manifest)
    (art / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "in.txt").write_text("a dog\n")
    proc = run_cli(
        "encode", str(art), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.npy")
    )
    assert message in assert_refused(proc, code)
    assert not (tmp_path / "o.npy").exists()


def test_debug_shows_the_traceback(model: Path, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"\xff\n")
    proc = run_cli(
        "--debug",
        "encode",
        str(model),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "o.npy"),
    )
    assert proc.returncode != 0
    assert "Traceback (most recent call last)" in proc.stderr
    assert "EncodeInputError" in proc.stderr
