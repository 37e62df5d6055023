"""Turn a catalog entry into a servable artifact: gather its files (download, or an existing directory),
convert them, export the ONNX graphs (unless ``--no-export``), and record where every file came from in
the manifest.

Everything is written into a staging directory next to ``DIR/NAME`` that is renamed into place at the end, so
a failure at any step leaves no artifact behind.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from lnserve.hashing import sha256_file

from ...converters.artifact import MANIFEST, model_name, read_artifact, staging_dir, write_json
from ...converters.errors import ArtifactError
from ..runtime.onnx_export import export_onnx
from .archive import extract_members
from .catalog import CatalogEntry, RemoteFile, source_url
from .download import Downloaded, Limits, Progress, RetryPolicy, download
from .errors import (
    ChecksumMismatchError,
    MissingFilesError,
    PullError,
    UnpublishedFileError,
)

log = logging.getLogger("lnserve.pull")

DOWNLOADS = ".downloads"  # DIR/.downloads/NAME/ holds the raw files (and .part files while downloading)
ProgressFactory = Callable[[str], Progress | None]  # file name -> callback for that file


@dataclass(frozen=True)
class PullOptions:
    """How to fetch: a mirror base URL, expected sha256 overrides, retries, and the cell override."""

    base_url: str | None = None
    sha256: Mapping[str, str] = field(default_factory=dict)  # file name -> hex, wins over the catalog
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    limits: Limits = field(default_factory=Limits)  # the stall timeout and the whole pull's deadline
    cell: str | None = None
    export: bool = True
    keep_downloads: bool = False
    dictionary: Path | None = None  # skip-thoughts-training sets: the vocab.py dictionary pkl
    word2vec: Path | None = None  # and, optionally, the word2vec file for vocabulary expansion


def pull(
    entry: CatalogEntry,
    root: Path,
    *,
    options: PullOptions,
    from_dir: Path | None = None,
    overwrite: bool = False,
    progress: ProgressFactory | None = None,
) -> dict[str, Any]:
    """Fetch (or take from ``from_dir``) the entry's files and write the artifact ``root/NAME``.

    Returns:
        The artifact's manifest, with its ``pull`` section.

    Raises:
        ArtifactError: ``root/NAME`` exists and ``overwrite`` is false (checked before any download).
        PullError: a download or archive failed (see ``lnserve.app.pull.errors``).
    """
    out = root / entry.name
    if out.exists() and not overwrite and any(out.iterdir()):
        raise ArtifactError(f"{out}: already exists (use --force to replace it)")
    _check_overrides(entry, options.sha256)
    model_name(out)  # a directory name no URL can address fails before any download
    _check_user_files(entry, options)
    root.mkdir(parents=True, exist_ok=True)
    with _workdir(root, entry) as work:
        if from_dir is None:
            records = _download_all(entry, root / DOWNLOADS / entry.name, work, options, progress)
        else:
            records = _collect_local(entry, from_dir, work, options)
        with staging_dir(out, overwrite=overwrite) as tmp:
            manifest = _convert(entry, work, tmp, model_name(out), options)
            if options.export:  # servable by the default onnx backend without building graphs at startup
                export_onnx(tmp)
            manifest = _record_pull(tmp, entry, records, from_dir)
        if from_dir is None and not options.keep_downloads:
            shutil.rmtree(root / DOWNLOADS / entry.name, ignore_errors=True)
            _rmdir_if_empty(root / DOWNLOADS)
    if manifest.get("cell", entry.cell) != entry.cell:
        log.warning(
            "%s: the converter detected cell %s, the catalog expects %s",
            entry.name,
            manifest["cell"],
            entry.cell,
        )
    return manifest


def _check_overrides(entry: CatalogEntry, sha256: Mapping[str, str]) -> None:
    known = {f.filename for f in entry.files} | set(entry.local_names)
    unknown = sorted(set(sha256) - known)
    if unknown:
        raise PullError(
            f"--sha256 names {', '.join(unknown)}, not files of {entry.name}: {', '.join(sorted(known))}"
        )


def _check_user_files(entry: CatalogEntry, options: PullOptions) -> None:
    """Before any download: a set that needs an unpublished file says so; options it cannot use are errors."""
    given = {"dictionary": options.dictionary, "word2vec": options.word2vec}
    converter = CONVERTERS.get(entry.converter)  # an unknown one is refused by _convert
    takes = set(entry.user_files) | (converter.options if converter is not None else set())
    stray = sorted(k for k, v in given.items() if v is not None and k not in takes)
    if stray:
        raise PullError(f"--{stray[0]} does not apply to {entry.name} (only to sets in the training format)")
    for option, why in entry.user_files.items():
        if given.get(option) is None:
            raise UnpublishedFileError(f"{entry.name}: {why}; nothing was downloaded")


@contextmanager
def _workdir(root: Path, entry: CatalogEntry) -> Iterator[Path]:
    """A scratch directory of links named as the converter expects; removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name}.pull-", dir=root))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _expected_sha(file: RemoteFile, name: str, options: PullOptions) -> str | None:
    return options.sha256.get(name) or (file.sha256 if name == file.filename else None)


def _download_all(
    entry: CatalogEntry, cache: Path, work: Path, options: PullOptions, progress: ProgressFactory | None
) -> dict[str, dict[str, Any]]:
    cache.mkdir(parents=True, exist_ok=True)
    records: dict[str, dict[str, Any]] = {}
    limits = options.limits.begin()  # one deadline for every file
    with httpx.Client(follow_redirects=True) as client:  # each try sets its timeouts from ``limits``
        for file in entry.files:
            url = source_url(file, options.base_url)
            got = download(
                url,
                cache / file.filename,
                client=client,
                sha256=_expected_sha(file, file.filename, options),
                size=file.size,
                retry=options.retry,
                limits=limits,
                progress=progress(file.filename) if progress else None,
            )
            records[file.filename] = _record(got)
            _provide(file, got.path, cache, work, options, records)
    return records


def _collect_local(
    entry: CatalogEntry, from_dir: Path, work: Path, options: PullOptions
) -> dict[str, dict[str, Any]]:
    """Take the files from a directory (air-gapped hosts): plain names, extracted archive members, or the
    archive itself."""
    records: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    for file in entry.files:
        extracted = {m: _find_local(from_dir, m, local) for m, local in file.members.items()}
        if file.members and all(extracted.values()):
            for member, local in file.members.items():
                path = extracted[member]
                assert path is not None
                records[local] = _local_record(path, _expected_sha(file, local, options), member=member)
                (work / local).symlink_to(path.resolve())
            continue
        path = from_dir / file.filename
        if not path.is_file():
            missing.append(file.filename if not file.members else f"{file.filename} (or its members)")
            continue
        records[file.filename] = _local_record(path, _expected_sha(file, file.filename, options))
        _provide(file, path, work, work, options, records)
    if missing:
        raise MissingFilesError(f"{from_dir}: missing {', '.join(missing)} for {entry.name}")
    return records


def _find_local(from_dir: Path, member: str, local: str) -> Path | None:
    for candidate in (from_dir / local, from_dir / member):  # extracted flat, or by `unzip` with its folders
        if candidate.is_file():
            return candidate
    return None


def _provide(
    file: RemoteFile,
    path: Path,
    extract_to: Path,
    work: Path,
    options: PullOptions,
    records: dict[str, dict[str, Any]],
) -> None:
    """Make the file (or its archive members) visible in the work directory under the converter's names."""
    if not file.members:
        (work / file.filename).symlink_to(path.resolve())
        return
    for local, extracted in extract_members(path, file.members, extract_to).items():
        member = next(m for m, n in file.members.items() if n == local)
        rec = _local_record(extracted, _expected_sha(file, local, options), member=member)
        rec.pop("path")  # a scratch or cache copy that is removed: the archive's record has the source
        records[local] = {"archive": file.filename, **rec}
        if extract_to != work:
            (work / local).symlink_to(extracted.resolve())


def _record(got: Downloaded) -> dict[str, Any]:
    return {"url": got.url, "sha256": got.sha256, "bytes": got.bytes, "verified": got.verified}


def _local_record(path: Path, expected: str | None, *, member: str | None = None) -> dict[str, Any]:
    digest = sha256_file(path)
    if expected is not None and digest != expected.lower():
        raise ChecksumMismatchError(f"{path}: sha256 {digest}, expected {expected.lower()}")
    rec: dict[str, Any] = {
        "path": str(path.resolve()),
        "sha256": digest,
        "bytes": path.stat().st_size,
        "verified": expected is not None,
    }
    if member is not None:
        rec["member"] = member
    return rec


def _order_embedding(
    entry: CatalogEntry, work: Path, out: Path, name: str, options: PullOptions
) -> dict[str, Any]:
    from ...converters.order_embedding import read_order_embedding, write_order_embedding

    model = read_order_embedding(work / entry.args["prefix"], cell=options.cell)
    return write_order_embedding(model, out, name=name, overwrite=True)


def _skip_thoughts(
    entry: CatalogEntry, work: Path, out: Path, name: str, options: PullOptions
) -> dict[str, Any]:
    from ...converters.skip_thoughts import convert_skip_thoughts

    uni, bi = entry.args.get("uni"), entry.args.get("bi")
    return convert_skip_thoughts(
        uni=work / uni if uni else None,
        bi=work / bi if bi else None,
        tables=work,
        out=out,
        name=name,
        cell=options.cell,
        overwrite=True,
    )


def _skip_thoughts_training(
    entry: CatalogEntry, work: Path, out: Path, name: str, options: PullOptions
) -> dict[str, Any]:
    from ...converters.skip_thoughts_training import convert_skip_thoughts_training

    assert options.dictionary is not None  # _check_user_files
    return convert_skip_thoughts_training(
        model=work / entry.args["model"],
        dictionary=options.dictionary,
        word2vec=options.word2vec,
        out=out,
        name=name,
        cell=options.cell,
        overwrite=True,
    )


@dataclass(frozen=True)
class Converter:
    """How ``pull`` runs one converter: the run, and the user options it takes beyond the set's own
    ``user_files``."""

    run: Callable[[CatalogEntry, Path, Path, str, PullOptions], dict[str, Any]]
    options: frozenset[str] = frozenset()


# converter name (``CatalogEntry.converter``; each family lists its own in ``Family.converters``, and
# ``tests/unit/converters/test_families.py`` holds the two lists equal) -> how to run it
CONVERTERS: dict[str, Converter] = {
    "order-embedding": Converter(_order_embedding),
    "skip-thoughts": Converter(_skip_thoughts),
    "skip-thoughts-training": Converter(_skip_thoughts_training, frozenset({"word2vec"})),
}


def _convert(entry: CatalogEntry, work: Path, out: Path, name: str, options: PullOptions) -> dict[str, Any]:
    converter = CONVERTERS.get(entry.converter)
    if converter is None:
        raise AssertionError(f"catalog entry {entry.name} names an unknown converter {entry.converter!r}")
    return converter.run(entry, work, out, name, options)


def _record_pull(
    artifact_dir: Path, entry: CatalogEntry, records: dict[str, dict[str, Any]], from_dir: Path | None
) -> dict[str, Any]:
    """Add a ``pull`` section to the manifest. manifest.json is not among the hashed ``files``, so the
    artifact still validates; it is checked here, before the staging directory is renamed into place."""
    mpath = artifact_dir / MANIFEST
    manifest = read_artifact(artifact_dir).manifest  # the one check of the staged artifact
    manifest["pull"] = {
        "catalog_entry": entry.name,
        "origin": entry.origin,
        "pulled_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "from_dir": str(from_dir.resolve()) if from_dir is not None else None,
        "files": records,
    }
    write_json(mpath, manifest)  # manifest.json is not among the hashed files: nothing to re-check
    return manifest


def _rmdir_if_empty(path: Path) -> None:
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
