"""The model artifact: a directory with ``manifest.json``, safetensors weights, the vocabulary and (for
skip-thoughts) memory-mappable word tables. Loading never unpickles anything.

Writes go to a sibling temporary directory that is renamed into place at the end, so a failed conversion
leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file, save_file

from lnserve.errors import brief
from lnserve.hashing import sha256_file, sha256_unchanged_file
from lnserve.storage import out_of_space_reported

from .bounded_json import MANIFEST_MAX_BYTES, TABLE_MAX_BYTES, read_json_file
from .errors import ArtifactError, ArtifactVersionError, ManifestMismatchError
from .families import FAMILIES as FAMILIES  # the registry of families, where it was (readers of galleries)
from .families import family_of, lookup
from .url_segment import SEGMENT_RULE, segment_fault

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
VOCAB = "vocab.json"
# skip-thoughts half -> {legacy parameter prefix: module}; bi-skip's backward direction is ``encoder_r``
SKIP_PART_MODULES: dict[str, dict[str, str]] = {
    "uni": {"encoder": "uni"},
    "bi": {"encoder": "bi_fwd", "encoder_r": "bi_bwd"},
}
_HASH_ON_LOAD_LIMIT = 256 << 20  # files larger than this (word tables) are checked by size, not hash


def model_name(out: Path, name: str | None = None) -> str:
    """The one naming rule for converted, pulled and trained models: ``name`` if given, else the artifact
    directory's own name (what the server falls back to when a manifest has no name).

    Raises:
        ArtifactError: the name cannot be one URL path segment (``/models/NAME/reload``).
    """
    chosen = name or Path(os.path.abspath(out)).name
    check_model_name(chosen)
    return chosen


def check_model_name(name: str) -> str:
    """``name`` if it can be addressed as one URL path segment (``converters.url_segment``), else
    ArtifactError."""
    fault = segment_fault(name) if name else "it is empty"
    if fault is not None:
        raise ArtifactError(f"bad model name {name!r}: {fault}; a model name must be {SEGMENT_RULE}")
    return name


@contextmanager
def staging_dir(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to ``out``; on success it atomically becomes ``out``.

    A symlinked ``out`` is refused: resolving it would make ``--force`` replace the link's target.
    """
    if out.is_symlink():
        raise ArtifactError(
            f"{out}: output path is a symbolic link (to {os.readlink(out)}); give the real directory instead"
        )
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
    write_replacing(path, json_bytes(obj))


def write_replacing(dest: Path, data: bytes) -> None:
    """Write ``dest`` via a temporary file and a rename; a failed write (e.g. a full disk: StorageFullError
    naming ``dest``) leaves neither a half-written ``dest`` nor the temporary file."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with out_of_space_reported(str(dest)):
            tmp.write_bytes(data)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# What a model's vectors depend on, besides the files: manifest sections and option keys. Everything else
# (name, description, notes, sources, training, pull, onnx, format and converter versions) is provenance.
_IDENTITY_SECTIONS = ("family", "cell", "cell_options", "parts", "dims", "options", "tokenizer", "defaults")
_NON_VECTOR_OPTIONS = frozenset({"margin", "encoder_in_options"})  # training loss margin; legacy cell label
_DERIVED_FILES = "onnx/"  # graphs exported from the weights: the backend never changes a vector
# int8 calibration (``converters.int8_calibration``): it changes int8 vectors only; the int8 pin names it
_NOT_IN_IDENTITY = (_DERIVED_FILES, "int8/")
IDENTITY_VERSION = 1


def model_identity(manifest: Mapping[str, Any]) -> str:
    """sha256 of what determines a model's vectors: the sha256 of every source file the manifest records
    (weights, vocabulary, word tables) and the vector-relevant sections (family, cell(s) and their options,
    dims, scoring options, tokenizer, defaults). Galleries pin it instead of the manifest's bytes, so
    ``lnserve export`` (which rewrites the manifest) or a rename never orphans a gallery, while any change
    of weights, vocabulary, cell or options does."""
    files = manifest.get("files") or {}
    doc: dict[str, Any] = {key: manifest.get(key) for key in _IDENTITY_SECTIONS}
    doc["options"] = {
        k: v for k, v in (manifest.get("options") or {}).items() if k not in _NON_VECTOR_OPTIONS
    }
    doc["files"] = {
        name: meta.get("sha256") if isinstance(meta, Mapping) else meta
        for name, meta in files.items()
        if not name.startswith(_NOT_IN_IDENTITY)
    }
    doc["identity_version"] = IDENTITY_VERSION
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def json_bytes(obj: Any) -> bytes:
    """The bytes ``write_json`` writes (manifests, vocabularies): one definition of the format."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def unexported_manifest_sha256(manifest: Mapping[str, Any]) -> str | None:
    """sha256 of this manifest as it was before ``lnserve export`` added its ``onnx`` section and graph files
    (None when it was never exported). Galleries made before model identities pinned those bytes; this
    recognises them even when the model was exported after the gallery was built."""
    if "onnx" not in manifest:
        return None
    before = {key: value for key, value in manifest.items() if key != "onnx"}
    files = manifest.get("files")
    if isinstance(files, Mapping):
        before["files"] = {n: meta for n, meta in files.items() if not n.startswith(_DERIVED_FILES)}
    return hashlib.sha256(json_bytes(before)).hexdigest()


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


def add_files(
    path: Path, manifest: Mapping[str, Any], files: Iterable[tuple[str, bytes]], **sections: Any
) -> dict[str, Any]:
    """Write files into an existing artifact and record them in its manifest, with the given sections.

    Each file goes through a temporary file and a rename and gets its size and sha256 in ``files`` like the
    converter's own; ``files`` may be a generator, so large blobs are held one at a time. Returns the new
    manifest.
    """
    manifest = dict(manifest)
    recorded = dict(manifest.get("files", {}))
    for rel, data in files:
        dest = path / rel
        dest.parent.mkdir(exist_ok=True)
        write_replacing(dest, data)
        recorded[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    manifest["files"] = recorded
    manifest.update(sections)
    write_json(path / MANIFEST, manifest)
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
        """One of the artifact's JSON files (``vocab.json``, ``dictionary.json``), within size and depth
        bounds: an artifact may come from anyone (``bounded_json``)."""
        try:
            return read_json_file(self.path / name, max_bytes=TABLE_MAX_BYTES)
        except (OSError, ValueError) as exc:
            raise ManifestMismatchError(f"{self.path / name}: unreadable ({exc})") from None

    def table(self, name: str) -> np.ndarray:
        """A word table, memory-mapped read-only (never read into RAM)."""
        try:
            return np.load(self.path / name, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ManifestMismatchError(f"{self.path / name}: unreadable table ({exc})") from None


def read_manifest(directory: Path) -> Any:
    """The JSON value of ``directory``'s manifest, read within bounds (a regular file of at most
    ``MANIFEST_MAX_BYTES``, nested at most ``MAX_DEPTH`` levels); not yet checked as a manifest.

    Raises:
        OSError: it cannot be read.
        ValueError: it is not JSON, or over a bound.
    """
    return read_json_file(Path(directory) / MANIFEST, max_bytes=MANIFEST_MAX_BYTES)


def read_artifact(path: Path) -> Artifact:
    """Open and check an artifact: format version, family, and every file against the manifest."""
    path = Path(path)
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise ArtifactError(f"{path}: not a model artifact (no {MANIFEST}); convert a checkpoint first")
    try:
        manifest = read_manifest(path)
    except (OSError, ValueError) as exc:
        raise ManifestMismatchError(f"{mpath}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format_version"), int):
        raise ManifestMismatchError(f"{mpath}: missing format_version")
    if manifest["format_version"] > FORMAT_VERSION:
        raise ArtifactVersionError(
            f"{path}: artifact format {manifest['format_version']} is newer than this lnserve reads "
            f"({FORMAT_VERSION}); upgrade lnserve"
        )
    if lookup(manifest) is None:
        raise ManifestMismatchError(f"{mpath}: unknown family {brief(manifest.get('family'), 60)}")
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
    if not family_of(manifest).stacked:
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
            f"{mpath}: cell_options.partial_rms must be a number in (0, 1], got {brief(p, 40)}"
        )
    if p != 1.0 and manifest.get("cell") not in ("rlngru", "rlnlstm"):
        raise ManifestMismatchError(
            f"{mpath}: partial_rms {p} needs an RMS cell, not {brief(manifest.get('cell'), 40)}"
        )


def _check_files(path: Path, files: Mapping[Any, Any]) -> None:
    """Every listed file is inside the artifact, a regular file, of the listed size and (up to a size)
    hash. A manifest is someone else's file: a name like ``../x`` or ``/etc/passwd`` would have had another
    file statted and hashed, and its size echoed to whoever asked for a reload."""
    for name, meta in files.items():
        where = f"{path / MANIFEST}: files entry {brief(name, 60)}"
        if not _inside(name):
            raise ManifestMismatchError(f"{where} is not a file name inside the artifact")
        if (
            not isinstance(meta, dict)
            or type(meta.get("bytes")) is not int
            or not isinstance(meta.get("sha256"), str)
        ):
            raise ManifestMismatchError(f'{where}: expected {{"bytes": <int>, "sha256": <hex>}}')
        fpath = path / name
        if not fpath.is_file():  # a FIFO or a device is not one either
            raise ManifestMismatchError(f"{path}: file {name} listed in the manifest is missing")
        size = fpath.stat().st_size
        if size != meta["bytes"]:
            raise ManifestMismatchError(f"{fpath}: {size} bytes, manifest says {meta['bytes']}")
        if size <= _HASH_ON_LOAD_LIMIT and sha256_unchanged_file(fpath) != meta["sha256"]:
            raise ManifestMismatchError(
                f"{fpath}: sha256 differs from the manifest (file modified or corrupt)"
            )


def _inside(name: Any) -> bool:
    """A relative POSIX path of plain parts (``weights.safetensors``, ``onnx/model.onnx``)."""
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        return False
    parts = PurePosixPath(name).parts
    return bool(parts) and not PurePosixPath(name).is_absolute() and ".." not in parts
