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
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from converters.errors import ArtifactError, ArtifactVersionError, ManifestMismatchError
from converters.hashing import sha256_file

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
VOCAB = "vocab.json"
FAMILIES = ("order-embedding", "skip-thoughts")
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
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


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
    _check_files(path, manifest.get("files", {}))
    return Artifact(path=path, manifest=manifest)


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
