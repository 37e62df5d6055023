"""The model artifact: a directory with ``manifest.json``, safetensors weights, the vocabulary and (for
skip-thoughts) memory-mappable word tables. Loading never unpickles anything.

Writes go to a sibling temporary directory that is renamed into place at the end, so a failed conversion
leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file, save_file

from lnserve.converters.errors import ArtifactError, ArtifactVersionError, ManifestMismatchError
from lnserve.converters.hashing import sha256_file

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
VOCAB = "vocab.json"
FAMILIES = ("order-embedding", "skip-thoughts")
# skip-thoughts half -> {legacy parameter prefix: module}; bi-skip's backward direction is ``encoder_r``
SKIP_PART_MODULES: dict[str, dict[str, str]] = {
    "uni": {"encoder": "uni"},
    "bi": {"encoder": "bi_fwd", "encoder_r": "bi_bwd"},
}
_HASH_ON_LOAD_LIMIT = 256 << 20  # files larger than this (word tables) are checked by size, not hash


@contextmanager
def staging_dir(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to ``out``; on success it atomically becomes ``out``."""
    out = out.resolve()
    if out.exists() and not overwrite and any(out.iterdir()):
        raise ArtifactError(f"{out}: output directory exists and is not empty (use --force to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide the artifact from a service running as another user
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: Path, obj: Any) -> None:
    """Write via a temporary file and a rename, so a manifest being rewritten is never seen half-written."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def finish_manifest(tmp: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Record size and sha256 of every file written so far, then write the manifest."""
    files = {}
    for path in sorted(tmp.iterdir()):
        if path.is_file() and path.name != MANIFEST:
            path.chmod(0o644)
            files[path.name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    manifest = {"format_version": FORMAT_VERSION, **manifest, "files": files}
    write_json(tmp / MANIFEST, manifest)
    return manifest


def save_weights(tmp: Path, tensors: Mapping[str, np.ndarray]) -> None:
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp / WEIGHTS))


@dataclass
class Artifact:
    """A converted model directory, validated on open; tensors and tables load lazily."""

    path: Path
    manifest: dict[str, Any]
    _tensors: dict[str, np.ndarray] | None = field(default=None, repr=False)

    @property
    def family(self) -> str:
        return str(self.manifest["family"])

    @property
    def partial_rms(self) -> float:
        """pRMSNorm fraction of a trained RMS model (``cell_options.partial_rms``); 1 = legacy RMSNorm."""
        return float(self.manifest.get("cell_options", {}).get("partial_rms", 1.0))

    @property
    def name(self) -> str:
        return str(self.manifest.get("name", self.path.name))

    def tensors(self) -> dict[str, np.ndarray]:
        if self._tensors is None:
            try:
                self._tensors = load_file(str(self.path / WEIGHTS))
            except (SafetensorError, OSError, ValueError) as exc:
                raise ManifestMismatchError(f"{self.path / WEIGHTS}: unreadable weights ({exc})") from None
        return self._tensors

    def read_json(self, name: str) -> Any:
        try:
            return json.loads((self.path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ManifestMismatchError(f"{self.path / name}: unreadable ({exc})") from None

    def table(self, name: str) -> np.ndarray:
        """A word table, memory-mapped read-only (never read into RAM)."""
        try:
            return np.load(self.path / name, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ManifestMismatchError(f"{self.path / name}: unreadable table ({exc})") from None


def read_artifact(path: Path) -> Artifact:
    """Open and check an artifact: format version, family, and every file against the manifest."""
    path = Path(path)
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise ArtifactError(f"{path}: not a model artifact (no {MANIFEST}); convert a checkpoint first")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ManifestMismatchError(f"{mpath}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format_version"), int):
        raise ManifestMismatchError(f"{mpath}: missing format_version")
    if manifest["format_version"] > FORMAT_VERSION:
        raise ArtifactVersionError(
            f"{path}: artifact format {manifest['format_version']} is newer than this lnserve reads "
            f"({FORMAT_VERSION}); upgrade lnserve"
        )
    if manifest.get("family") not in FAMILIES:
        raise ManifestMismatchError(f"{mpath}: unknown family {manifest.get('family')!r}")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ManifestMismatchError(f"{mpath}: missing the files table")
    _check_files(path, files)
    _check_dims(path, manifest)
    _check_cell_options(mpath, manifest)
    return Artifact(path=path, manifest=manifest)


_Shape = tuple[int | None, ...]  # None: decided by the cell type, not checked here


def _shapes_from_manifest(manifest: Mapping[str, Any]) -> tuple[dict[str, _Shape], dict[str, _Shape]]:
    """Weight shapes and table shapes the manifest's dims imply."""
    dims = manifest["dims"]
    if manifest["family"] == "order-embedding":
        weights: dict[str, _Shape] = {
            "sentence.embedding.weight": (dims["n_words"], dims["dim_word"]),
            "image.proj.weight": (dims["dim"], dims["dim_image"]),
            "image.proj.bias": (dims["dim"],),
            "sentence.rnn.cell.weight_ih": (None, dims["dim_word"]),
            "sentence.rnn.cell.weight_hh": (None, dims["dim"]),
        }
        return weights, {}
    weights, tables = dict[str, _Shape](), dict[str, _Shape]()
    for part, info in manifest["parts"].items():
        for module in SKIP_PART_MODULES[part].values():
            weights[f"{module}.cell.weight_ih"] = (None, dims["dim_word"])
            weights[f"{module}.cell.weight_hh"] = (None, info["dim"])
        tables[info["table"]] = (dims["n_table_rows"], dims["dim_word"])
    return weights, tables


def _check_dims(path: Path, manifest: Mapping[str, Any]) -> None:
    """The manifest's dimensions agree with the weights and tables (headers only, nothing is loaded)."""
    try:
        weights, tables = _shapes_from_manifest(manifest)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ManifestMismatchError(f"{path / MANIFEST}: incomplete dims ({exc})") from None
    required = [WEIGHTS, *tables]
    unlisted = [name for name in required if name not in manifest["files"]]
    if unlisted:
        raise ManifestMismatchError(f"{path / MANIFEST}: does not list {', '.join(unlisted)}")
    found: dict[str, tuple[int, ...]] = {}
    try:
        with safe_open(str(path / WEIGHTS), framework="numpy") as st:
            names = set(st.keys())
            for key in weights:
                found[key] = tuple(st.get_slice(key).get_shape()) if key in names else ()
        for name in tables:
            with (path / name).open("rb") as f:
                np.lib.format.read_magic(f)
                found[name] = tuple(np.lib.format.read_array_header_1_0(f)[0])
    except (SafetensorError, OSError, ValueError) as exc:
        raise ManifestMismatchError(f"{path}: unreadable weights or table ({exc})") from None
    for key, want in {**weights, **tables}.items():
        got = found[key]
        if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got, strict=True)):
            shown = tuple("*" if w is None else w for w in want)
            raise ManifestMismatchError(f"{path}: {key} has shape {got}, the manifest implies {shown}")


def _check_cell_options(mpath: Path, manifest: Mapping[str, Any]) -> None:
    """``cell_options.partial_rms`` (pRMSNorm, trained models): a fraction in (0, 1] of an RMS cell."""
    opts = manifest.get("cell_options", {})
    p = opts.get("partial_rms", 1.0) if isinstance(opts, dict) else None
    if not isinstance(p, int | float) or not 0.0 < p <= 1.0:
        raise ManifestMismatchError(
            f"{mpath}: cell_options.partial_rms must be a number in (0, 1], got {p!r}"
        )
    if p != 1.0 and manifest.get("cell") not in ("rlngru", "rlnlstm"):
        raise ManifestMismatchError(
            f"{mpath}: partial_rms {p} needs an RMS cell, not {manifest.get('cell')!r}"
        )


def _check_files(path: Path, files: Mapping[str, Mapping[str, Any]]) -> None:
    for name, meta in files.items():
        fpath = path / name
        if not fpath.is_file():
            raise ManifestMismatchError(f"{path}: file {name} listed in the manifest is missing")
        size = fpath.stat().st_size
        if size != meta.get("bytes"):
            raise ManifestMismatchError(f"{fpath}: {size} bytes, manifest says {meta.get('bytes')}")
        if size <= _HASH_ON_LOAD_LIMIT and sha256_file(fpath) != meta.get("sha256"):
            raise ManifestMismatchError(
                f"{fpath}: sha256 differs from the manifest (file modified or corrupt)"
            )
