"""Artifacts: tampered manifests, edited dims, missing / modified files, newer formats, corrupt JSON."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lnserve.converters.artifact import FORMAT_VERSION, add_files, read_artifact
from lnserve.converters.errors import ArtifactError, ArtifactVersionError, ManifestMismatchError
from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from lnserve.converters.skip_thoughts import convert_skip_thoughts
from tests.conftest import LEGACY
from tests.support.broken import OE_DIR


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pristine")
    write_order_embedding(read_order_embedding(OE_DIR / "oe_order_lngru"), root / "oe", name="oe")
    st = LEGACY / "skipthoughts_gru"
    convert_skip_thoughts(
        uni=st / "uni_skip.npz", bi=st / "bi_skip.npz", tables=st, out=root / "st", name="st"
    )
    return {"oe": root / "oe", "st": root / "st"}


def _copy(pristine: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine[kind], tmp_path / kind))


def _edit_manifest(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_pristine_artifacts_open_and_tables_are_memory_mapped(pristine: dict[str, Path]) -> None:
    assert read_artifact(pristine["oe"]).manifest["format_version"] == FORMAT_VERSION
    table = read_artifact(pristine["st"]).table("uni_table.npy")
    assert isinstance(table, np.memmap) and table.shape == (47, 10) and table.dtype == np.float32


@pytest.mark.parametrize(
    ("kind", "edit", "message"),
    [
        (
            "oe",
            lambda m: m["dims"].update(dim=17),
            r"image\.proj\.weight has shape \(18, 20\), the manifest implies \(17, 20\)",
        ),
        ("oe", lambda m: m["dims"].update(dim_word=11), r"sentence\.embedding\.weight has shape \(50, 10\)"),
        ("oe", lambda m: m["dims"].update(n_words=60), r"sentence\.embedding\.weight has shape \(50, 10\)"),
        (
            "st",
            lambda m: m["dims"].update(n_table_rows=46),
            r"uni_table\.npy has shape \(47, 10\), the manifest implies \(46, 10\)",
        ),
        ("st", lambda m: m["parts"]["bi"].update(dim=9), r"bi_fwd\.cell\.weight_hh has shape \(24, 8\)"),
        ("oe", lambda m: m["files"].pop("weights.safetensors"), "does not list weights.safetensors"),
        ("oe", lambda m: m["files"]["vocab.json"].update(sha256="0" * 64), "vocab.json: sha256 differs"),
        (
            "oe",
            lambda m: m["files"]["vocab.json"].update(bytes=1),
            r"vocab\.json: \d+ bytes, manifest says 1",
        ),
        ("oe", lambda m: m.update(family="bert"), "unknown family 'bert'"),
        ("oe", lambda m: m.pop("format_version"), "missing format_version"),
        ("st", lambda m: m.pop("dims"), "incomplete dims"),
    ],
)
def test_tampered_manifest_is_refused(
    kind: str, edit: Callable[[dict[str, Any]], None], message: str, pristine: dict[str, Path], tmp_path: Path
) -> None:
    path = _copy(pristine, kind, tmp_path)
    _edit_manifest(path, edit)
    with pytest.raises(ManifestMismatchError, match=message):
        read_artifact(path)


def test_modified_file_same_size_is_refused(pristine: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(pristine, "oe", tmp_path)
    vocab = path / "vocab.json"
    data = bytearray(vocab.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit, same size
    vocab.write_bytes(bytes(data))
    with pytest.raises(ManifestMismatchError, match=r"vocab\.json: sha256 differs from the manifest"):
        read_artifact(path)


def test_missing_file_is_refused(pristine: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(pristine, "st", tmp_path)
    (path / "bi_table.npy").unlink()
    with pytest.raises(ManifestMismatchError, match=r"file bi_table\.npy listed in the manifest is missing"):
        read_artifact(path)


def test_newer_format_version_is_refused(pristine: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(pristine, "oe", tmp_path)
    _edit_manifest(path, lambda m: m.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(
        ArtifactVersionError, match=f"artifact format {FORMAT_VERSION + 1} is newer.*upgrade lnserve"
    ):
        read_artifact(path)


def test_corrupt_json_is_refused(pristine: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(pristine, "oe", tmp_path)
    (path / "manifest.json").write_text('{"format_version": 1, "family": ')
    with pytest.raises(ManifestMismatchError, match=r"manifest\.json: not valid JSON"):
        read_artifact(path)


def test_not_an_artifact(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="not a model artifact"):
        read_artifact(tmp_path)


def test_added_files_are_recorded_and_checked(pristine: dict[str, Path], tmp_path: Path) -> None:
    """``add_files`` (ONNX export) leaves an artifact that validates and guards the new files too."""
    path = _copy(pristine, "oe", tmp_path)
    blob = b"\x00graph\xff" * 100
    manifest = add_files(path, read_artifact(path).manifest, iter([("extra/part.bin", blob)]), extra={"n": 1})
    reread = read_artifact(path).manifest
    assert reread == manifest and reread["extra"] == {"n": 1}
    record = {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
    assert reread["files"]["extra/part.bin"] == record
    assert sorted(p.name for p in (path / "extra").iterdir()) == ["part.bin"]  # no temporary file left
    (path / "extra/part.bin").write_bytes(b"\x01" + blob[1:])
    with pytest.raises(ManifestMismatchError, match=r"extra/part\.bin: sha256 differs"):
        read_artifact(path)


@pytest.mark.parametrize("dangling", [False, True])
def test_symlinked_output_is_refused_even_with_overwrite(dangling: bool, tmp_path: Path) -> None:
    """Writing through a link replaced (or created) the link's target; the target stays untouched."""
    target = tmp_path / "elsewhere"
    if not dangling:
        target.mkdir()
        (target / "keep.txt").write_text("mine")
    link = tmp_path / "out"
    link.symlink_to(target, target_is_directory=True)
    model = read_order_embedding(OE_DIR / "oe_order_gru")
    with pytest.raises(ArtifactError, match=r"out: output path is a symbolic link \(to .*elsewhere\)"):
        write_order_embedding(model, link, name="x", overwrite=True)
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out", *(["elsewhere"] * (not dangling))]
    )
    assert dangling or (target / "keep.txt").read_text() == "mine"


_COUNT_WEIGHT_READS = """
import os, sys
from pathlib import Path
model = Path(sys.argv[1])
weights = str(model / "weights.safetensors")
reads = []
sys.addaudithook(lambda event, args: event == "open" and str(args[0]) == weights and reads.append(1))
from lnserve.app.runtime.engine import Engine
from lnserve.app.http.server import check_models
from lnserve.app.settings import load_settings
check_models(load_settings({"models": [str(model)]}))
Engine.open(model, backend="onnx")
after_start = len(reads)
with open(weights, "r+b") as f:  # the same bytes rewritten: a new mtime
    first = f.read(1)
    f.seek(0)
    f.write(first)
os.utime(weights, ns=(11 * 10**17, 11 * 10**17))  # still old, but another mtime
before_reload = len(reads)
Engine.open(model, backend="onnx")
print(after_start, len(reads) - before_reload)
"""


def test_serve_reads_unchanged_weights_once_and_a_rewritten_file_again(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    """``serve`` checks every model before binding, then loads it: the weights were read and hashed twice
    at each start (140 MB at skip-thoughts size)."""
    model = tmp_path / "m"
    shutil.copytree(artifacts["oe_order_lngru"], model)
    for f in model.iterdir():
        os.utime(f, ns=(10**18, 10**18))  # an old file: racy-clean, so its digest may be remembered
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _COUNT_WEIGHT_READS, str(model)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    at_start, after_rewrite = map(int, proc.stdout.split())
    assert at_start == 1  # the check's hash; loading maps the file through safetensors' own reader
    assert after_rewrite == 1  # new mtime: hashed again
