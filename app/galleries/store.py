"""GalleryStore: named, persistent galleries of one model's embeddings, searched by exact brute force.

Layout of ``ROOT/NAME/``:

* ``gallery.sqlite`` (WAL, synchronous=FULL): ``meta`` (the gallery's identity: kind, dim, model name and
  model identity, family, method), ``counters`` (``n_rows`` acknowledged vector rows, ``n_deleted``),
  ``items`` (``pos`` = row in the vector file, unique string ``id``, JSON ``payload``) and ``blocks`` (one
  CRC-32 per append of rows: ``lnserve.app.galleries.integrity``).
* ``vectors.f32``: raw little-endian float32 rows, append-only, memory-mapped for scoring.
* ``write.lock``: ``flock`` serialising writers across threads and processes.

Why a kill -9 never loses or half-shows an item: a write appends its rows past ``n_rows`` and fsyncs the
vector file, then ONE SQLite transaction inserts the items and the rows' checksum and advances ``n_rows``;
only that commit acknowledges them. Rows past ``n_rows`` (a crash between the two steps) are invisible and
the next write truncates them. Readers see committed rows only. Deletes remove the item row (a tombstone:
the vector row stays, masked out of searches).

Damage is detected, never served nor "healed": every use checks the files against the database (readable
database with valid values, lock and vector file present, vector file holding every acknowledged row), and
each process verifies every acknowledged row against its checksum once (new rows as they appear). A gallery
failing a check raises ``GalleryCorruptError`` for every read and write, so it is quarantined while the
others serve; nothing ever extends a short vector file with zeros. ``check`` reports, ``repair`` cuts a
gallery back to its last consistent acknowledged state.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import functools
import json
import logging
import math
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from lnserve.app.galleries import integrity
from lnserve.app.galleries.errors import (
    DuplicateItemError,
    GalleryCorruptError,
    GalleryExistsError,
    GalleryInputError,
    GalleryMismatchError,
    GalleryNotFoundError,
    InvalidItemIdError,
    ItemNotFoundError,
)
from lnserve.app.runtime.model_ref import ModelRef
from lnserve.app.runtime.retrieval import Side, get_kernel, metric_for, score_info, top_k
from lnserve.converters.artifact import FAMILIES
from lnserve.converters.errors import StorageFullError
from lnserve.converters.storage import out_of_space_reported, storage_full
from lnserve.converters.url_segment import SEGMENT_RULE, segment_fault

log = logging.getLogger("lnserve.galleries")

KINDS = ("images", "captions")
MAX_K = 1000
MAX_QUERIES = 1024
MAX_DIM = 1 << 16
DB, VECTORS, LOCK = "gallery.sqlite", "vectors.f32", "write.lock"
# The one definition of a gallery name (store, HTTP schemas, CLI); always matched whole (``fullmatch``): a
# ``$`` anchor would also match before a trailing newline and let ``"evil\n"`` become a directory name.
GALLERY_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
GALLERY_NAME_RULE = "1-128 letters, digits, '.', '_' or '-', starting alphanumeric"
_NAME = re.compile(GALLERY_NAME_PATTERN)
_SQL_VARS = 500  # rows per IN (...) query, under SQLite's variable limit
_STALE_CREATING_S = 600.0  # a creating directory with no lock file this old was left by a crash
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_MALFORMED_BLOCK = "typeof(n) != 'integer' OR typeof(crc32) != 'integer'"


def default_root() -> Path:
    """``~/.local/share/lnserve/galleries``: the root when none is given (``LNSERVE_GALLERIES_DIR`` is read
    by ``lnserve.app.settings.Settings``, whose ``galleries_dir`` callers pass)."""
    return Path.home() / ".local" / "share" / "lnserve" / "galleries"


def same_model(a: GalleryInfo, b: GalleryInfo) -> bool:
    """Whether two galleries were embedded by the same model (both identities known: compare them; else
    the manifests they pinned, conservatively)."""
    if a.model_identity is not None and b.model_identity is not None:
        return a.model_identity == b.model_identity
    return a.model_sha256 == b.model_sha256


@dataclass(frozen=True)
class GalleryInfo:
    name: str
    uid: str
    kind: str
    dim: int
    model: str
    model_sha256: str  # the model's manifest.json when the gallery was made (pinned by older galleries)
    family: str
    method: str
    metric: str
    created_at: float
    model_identity: str | None = None  # None: made before identities; pinned by model_sha256 until used
    count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "score": score_info(self.metric), "state": "ok", "reason": None}

    def summary(self) -> dict[str, Any]:
        """One line of ``/info``."""
        return {"name": self.name, "state": "ok", "reason": None, "kind": self.kind, "model": self.model,
                "count": self.count, "metric": self.metric}  # fmt: skip


@dataclass(frozen=True)
class CorruptGallery:
    """A quarantined gallery: why it cannot be served, and what could still be read of it."""

    name: str
    reason: str
    info: GalleryInfo | None = None

    def as_dict(self) -> dict[str, Any]:
        known = self.info.as_dict() if self.info is not None else {}
        return {**known, "name": self.name, "state": "corrupt", "reason": self.reason}

    def summary(self) -> dict[str, Any]:
        known = self.info.summary() if self.info is not None else {}
        return {"kind": None, "model": None, "count": None, "metric": None, **known,
                "name": self.name, "state": "corrupt", "reason": self.reason}  # fmt: skip


GalleryEntry = GalleryInfo | CorruptGallery


@dataclass(frozen=True)
class CheckReport:
    """``check``: the gallery's state, what was verified, and the first fault found (if any)."""

    name: str
    ok: bool
    reason: str | None
    rows: int  # acknowledged rows (live items + tombstones)
    count: int  # live items
    verified_rows: int  # rows verified against their checksums
    legacy_rows: int  # rows without checksums (made before them), checked for finite values only
    good_rows: int  # rows [0, good_rows) are consistent: what repair keeps


@dataclass(frozen=True)
class RepairReport:
    """``repair``: what was wrong, what was cut, and what was dropped."""

    name: str
    reason: str | None  # the fault repaired (None: nothing to repair)
    rows_before: int
    rows_after: int
    dropped_ids: list[str] = field(default_factory=list)  # live items removed, in insertion order
    fixed: list[str] = field(default_factory=list)  # other fixes (recreated files, recounted counters)
    applied: bool = True  # False for a dry run

    @property
    def changed(self) -> bool:
        return self.rows_after != self.rows_before or bool(self.dropped_ids) or bool(self.fixed)


@dataclass(frozen=True)
class _State:
    """One read of a gallery's database, checked against its files."""

    info: GalleryInfo
    n_rows: int
    n_deleted: int
    repairs: int  # counter bumped by every repair: cached state from before one is never reused
    vectors_id: tuple[int, int]  # (st_dev, st_ino) of vectors.f32: a replaced file is verified afresh

    @property
    def key(self) -> tuple[str, int, tuple[int, int]]:
        """What cached verification and snapshots are valid for (rows aside)."""
        return (self.info.uid, self.repairs, self.vectors_id)


@dataclass
class _Snapshot:
    """Per-gallery search state cached between queries: which rows are live, and the vector map."""

    key: tuple[str, int, tuple[int, int]]
    n_rows: int
    n_deleted: int
    valid: np.ndarray
    vectors: np.ndarray | None


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _out_of_space_reported(method: _Method) -> _Method:
    """A use that runs out of space raises ``StorageFullError`` naming the gallery (HTTP 507), not a bare
    OSError or SQLite's "disk I/O error": nothing acknowledged is lost (vectors are appended past the
    acknowledged end and committed after their fsync; a failed append cuts its tail at once). Every write
    path has it, and so do reads: SQLite writes a WAL index file to open a database, even to read it."""

    @functools.wraps(method)
    def checked(self: GalleryStore, name: str, *args: Any, **kwargs: Any) -> Any:
        with out_of_space_reported(f"gallery {name!r}", self.root):
            return method(self, name, *args, **kwargs)

    return checked  # type: ignore[return-value]


def _removal_reported(method: _Method) -> _Method:
    """A use that loses the race with a removal (``DELETE /galleries/NAME``, ``lnserve gallery rm``) raises
    ``GalleryNotFoundError``: its files vanish mid-use, which would otherwise read as damage (a missing lock
    or vector file: a false ``gallery_corrupt``) or as an I/O error (SQLite opening the WAL of a renamed
    database). The gallery's directory is identified when the use starts: if it is gone, replaced or (made
    meanwhile) new when the use fails, the failure is the race's, never reported as anything else."""

    @functools.wraps(method)
    def checked(self: GalleryStore, name: str, *args: Any, **kwargs: Any) -> Any:
        with self._removal_is_not_found(name):
            return method(self, name, *args, **kwargs)

    return checked  # type: ignore[return-value]


class GalleryStore:
    """All galleries under one root directory. Thread-safe; several processes may share a root."""

    def __init__(self, root: Path | str | None = None, *, scorer: str | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.scorer = scorer
        self._snapshots: dict[str, _Snapshot] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._locks_lock = threading.Lock()
        # verification, per gallery: (state key, rows verified) and ((*state key, n_rows), fault)
        self._verified: dict[str, tuple[tuple[str, int, tuple[int, int]], int]] = {}
        self._failed: dict[str, tuple[tuple[str, int, tuple[int, int], int], str]] = {}

    # -- galleries ----------------------------------------------------------------------------------------
    @_out_of_space_reported
    def create(self, name: str, *, kind: str, model: ModelRef, exist_ok: bool = False) -> GalleryInfo:
        """Create an empty gallery of ``kind`` (images | captions) for ``model``.

        Raises:
            GalleryInputError: bad name or kind. GalleryExistsError: the name is taken (unless ``exist_ok``
            and the existing gallery has the same kind and model).
        """
        check_gallery_name(name)
        if kind not in KINDS:
            raise GalleryInputError(f"gallery kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if model.family == "skip-thoughts" and kind != "captions":
            raise GalleryMismatchError("skip-thoughts models embed text only: use kind 'captions'")
        final = self.root / name
        if final.exists():
            return self._existing(name, kind, model, exist_ok)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.creating-", dir=self.root))
        info = GalleryInfo(
            name=name,
            uid=uuid.uuid4().hex,
            kind=kind,
            dim=model.dim,
            model=model.name,
            model_sha256=model.manifest_sha256,
            family=model.family,
            method=model.method,
            metric=metric_for(model.method, model.family),
            created_at=time.time(),
            model_identity=model.identity,
        )
        lock_fd = os.open(tmp / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)  # held until renamed: clean_leftovers leaves this one alone
            _init_db(tmp / DB, info)
            with open(tmp / VECTORS, "wb") as f:
                os.fsync(f.fileno())
            os.fsync(lock_fd)
            tmp.chmod(0o755)
            try:
                os.rename(tmp, final)
            except OSError:
                return self._existing(name, kind, model, exist_ok)
            _fsync_dir(self.root)
        finally:
            os.close(lock_fd)
            shutil.rmtree(tmp, ignore_errors=True)
        return info

    def _existing(self, name: str, kind: str, model: ModelRef, exist_ok: bool) -> GalleryInfo:
        info = self.get(name)
        if not exist_ok:
            raise GalleryExistsError(f"gallery {name!r} already exists")
        if info.kind != kind or not model.matches(info):
            raise GalleryExistsError(f"gallery {name!r} exists with another kind or model")
        self._adopt_identity(name, info, model)
        return info

    @_out_of_space_reported
    @_removal_reported
    def get(self, name: str) -> GalleryInfo:
        """The gallery's identity and live item count.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: the gallery is damaged (quarantined).
        """
        with self._db(name) as db:
            return self._open(name, db).info

    def list(self) -> builtins.list[GalleryEntry]:
        """Every gallery under the root, by name; a damaged one as a ``CorruptGallery`` with its reason.
        Cheap: checksums are not verified here (``verify_all`` does), but a fault found earlier is shown."""
        out: builtins.list[GalleryEntry] = []
        for name in self._names():
            try:
                with self._removal_is_not_found(name), self._db(name) as db:
                    out.append(self._open(name, db, scan=False).info)
            except GalleryNotFoundError:
                continue  # removed meanwhile
            except GalleryCorruptError as exc:
                out.append(CorruptGallery(name, exc.reason, self._readable_info(name)))
            except (OSError, sqlite3.Error) as exc:  # e.g. permissions: not servable either
                if (full := storage_full(exc, f"gallery {name!r}", self.root)) is not None:
                    raise full from None  # SQLite cannot open a database on a full disk: not damage
                out.append(CorruptGallery(name, f"cannot be read ({type(exc).__name__}: {exc})"))
        return out

    def verify_all(self) -> builtins.list[GalleryEntry]:
        """``verify`` every gallery (the server's start-up check); a damaged one is returned as a
        ``CorruptGallery``, never raised, so one bad gallery never stops the others."""
        out: builtins.list[GalleryEntry] = []
        for name in self._names():
            try:
                out.append(self.verify(name))  # a gallery removed meanwhile: GalleryNotFoundError
            except GalleryNotFoundError:
                continue
            except GalleryCorruptError as exc:
                out.append(CorruptGallery(name, exc.reason, self._readable_info(name)))
            except StorageFullError as exc:  # not damage: verified at its next use, once there is room
                log.warning("gallery %s: not verified now: %s", name, exc)
            except (OSError, sqlite3.Error) as exc:
                out.append(CorruptGallery(name, f"cannot be read ({type(exc).__name__}: {exc})"))
        return out

    @_out_of_space_reported
    @_removal_reported
    def verify(self, name: str) -> GalleryInfo:
        """Check a gallery in full (files, counters, every acknowledged row against its checksum) and record
        the checksums of rows written before checksums existed (trusted on first use, once verified finite).

        Raises:
            GalleryNotFoundError. GalleryCorruptError: the gallery is damaged.
        """
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self._write_lock(name))
                writable = True
            except OSError as exc:  # a read-only gallery (permissions, mount): verified, nothing recorded
                if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                writable = False
            db = stack.enter_context(self._db(name))
            state = self._open(name, db)
            if writable:
                self._record_legacy(name, db, state)
            return state.info

    @_out_of_space_reported
    @_removal_reported
    def check(self, name: str) -> CheckReport:
        """Verify a gallery in full without changing it (``lnserve gallery check``); rows without checksums
        are checked for finite values only.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: no check can look past the fault (the database or its
            description is missing or unreadable).
        """
        with self._db(name) as db:
            db.execute("BEGIN")
            report = self._inspect(name, db)[0]
            db.execute("COMMIT")
        return report

    def _inspect(self, name: str, db: sqlite3.Connection) -> tuple[CheckReport, GalleryInfo]:
        """Every fault of a gallery whose database is readable, and how many rows are consistent."""
        gdir = self.root / name
        info, n_rows, n_deleted = self._read_state(name, db)
        faults = [f"{LOCK} is missing"] if not (gdir / LOCK).is_file() else []
        found = integrity.scan(db, gdir / VECTORS, info.dim, n_rows)
        if not (gdir / VECTORS).is_file():
            faults.append(f"{VECTORS} is missing ({n_rows} rows are acknowledged)")
        elif found.fault is not None:
            faults.append(found.fault)
        items = _items_fault(db, n_rows, n_deleted)
        faults += [items] if items else []
        report = CheckReport(
            name=name,
            ok=not faults,
            reason="; ".join(faults) or None,
            rows=n_rows,
            count=n_rows - n_deleted,
            verified_rows=min(found.covered, found.good_rows),
            legacy_rows=max(0, n_rows - found.covered),
            good_rows=found.good_rows,
        )
        return report, info

    @_out_of_space_reported
    @_removal_reported
    def repair(self, name: str, *, dry_run: bool = False) -> RepairReport:
        """Cut a damaged gallery back to its last consistent acknowledged state (``lnserve gallery
        repair``): keep the rows before the first fault, drop the items stored at or after it, recreate a
        missing lock or vector file, recount the counters.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: beyond repair (no readable database or description).
        """
        vectors = self._path(name) / VECTORS
        with contextlib.ExitStack() as stack:
            lock_missing = not (vectors.parent / LOCK).is_file()
            if not dry_run:
                stack.enter_context(self._write_lock(name, create=True))
            try:
                db = stack.enter_context(self._db(name))
                found, info = self._inspect(name, db)
            except GalleryCorruptError as exc:
                raise GalleryCorruptError(
                    name,
                    f"{exc.reason}; repair cannot rebuild the database: restore the gallery from a backup "
                    f"or remove it (lnserve gallery rm {name})",
                ) from None
            cut, n_rows = found.good_rows, found.rows
            dropped = [
                str(r[0]) for r in db.execute("SELECT id FROM items WHERE pos >= ? ORDER BY pos", (cut,))
            ]
            kept = int(db.execute("SELECT count(*) FROM items WHERE pos < ?", (cut,)).fetchone()[0])
            fixed = [f"recreated {LOCK}"] if lock_missing else []
            fixed += [f"recreated an empty {VECTORS}"] if not vectors.is_file() else []
            if cut == n_rows and kept != found.count:
                fixed.append(f"recounted the counters ({kept} live items)")
            reasons = [f"{LOCK} is missing"] if lock_missing and not dry_run else []  # created just now
            reason = "; ".join([*reasons, *([found.reason] if found.reason else [])]) or None
            report = RepairReport(name, reason, n_rows, cut, dropped, fixed, applied=not dry_run)
            if dry_run or not report.changed:
                return report
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM items WHERE pos >= ?", (cut,))
            db.execute(integrity.BLOCKS_DDL)
            db.execute(f"DELETE FROM blocks WHERE start + n > ? OR {_MALFORMED_BLOCK}", (cut,))
            db.execute("UPDATE counters SET value = ? WHERE key = 'n_rows'", (cut,))
            db.execute("UPDATE counters SET value = ? WHERE key = 'n_deleted'", (cut - kept,))
            db.execute(
                "INSERT INTO counters (key, value) VALUES ('repairs', 1) "
                "ON CONFLICT (key) DO UPDATE SET value = value + 1"
            )
            db.execute("COMMIT")
            with open(vectors, "ab") as f:  # creates a missing file, never extends one
                if cut < n_rows and os.fstat(f.fileno()).st_size > cut * 4 * info.dim:
                    f.truncate(cut * 4 * info.dim)
                os.fsync(f.fileno())
        self._forget(name)
        return report

    @_out_of_space_reported
    def remove(self, name: str) -> None:
        """Delete a gallery and its files (a damaged one too); ``DELETE /galleries/NAME`` and ``lnserve
        gallery rm`` both come here. Crash-safe: one atomic rename to ``.NAME.removed-*`` (made durable) takes
        the gallery away whole, then the files go; a crash in between leaves a leftover that no listing shows
        and ``clean_leftovers`` deletes. The rename waits for a write in progress (the gallery's write lock),
        so an add is either acknowledged before the removal or fails with gallery_not_found.

        Raises:
            GalleryNotFoundError: no gallery of that name.
        """
        path = self._path(name)
        trash = self.root / f".{name}.removed-{uuid.uuid4().hex}"
        lock = contextlib.nullcontext() if not (path / LOCK).is_file() else self._write_lock(name)
        try:
            with lock:
                os.rename(path, trash)
        except (FileNotFoundError, GalleryNotFoundError):
            raise GalleryNotFoundError(f"no gallery named {name!r}") from None
        _fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)
        self._forget(name)

    def clean_leftovers(self) -> builtins.list[str]:
        """Delete what crashed creations and removals left in the root (``.NAME.creating-*``,
        ``.NAME.removed-*``); a creation still in progress in another process (its lock held) is left alone.
        Returns the names deleted."""
        if not self.root.is_dir():
            return []
        removed = []
        for path in sorted(self.root.iterdir()):
            leftover = path.name.startswith(".") and path.is_dir() and not path.is_symlink()
            if not leftover:
                continue
            if ".removed-" in path.name or (".creating-" in path.name and not _creation_alive(path)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
        return removed

    # -- items --------------------------------------------------------------------------------------------
    @_out_of_space_reported
    @_removal_reported
    def add_items(
        self,
        name: str,
        vectors: np.ndarray,
        *,
        ids: Sequence[str] | None = None,
        payloads: Sequence[Any] | None = None,
        kind: str | None = None,
        model: ModelRef | None = None,
    ) -> builtins.list[str]:
        """Append embedded items durably; returns their ids once acknowledged (committed).

        Args:
            vectors: (n, dim) embeddings from the gallery's model (encode text / features first).
            ids: unique string ids (default: random hex). payloads: JSON-serialisable values or None.
            kind, model: when given, checked against the gallery (GalleryMismatchError).

        Raises:
            GalleryInputError (shape, non-finite values, bad ids/payloads), DuplicateItemError,
            GalleryNotFoundError, GalleryMismatchError, GalleryCorruptError (nothing is written).
        """
        info = self.get(name)
        self._check_model(name, info, kind=kind, model=model)
        vecs = _as_matrix(vectors, info.dim, what="item vectors", limit=None)
        n = vecs.shape[0]
        ids = [new_item_id() for _ in range(n)] if ids is None else [check_item_id(i) for i in ids]
        payload_json = [None] * n if payloads is None else [_dump_payload(p) for p in payloads]
        if len(ids) != n or len(payload_json) != n:
            raise GalleryInputError(f"{n} vectors but {len(ids)} ids and {len(payload_json)} payloads")
        if len(set(ids)) != n:
            dup = next(i for i in ids if ids.count(i) > 1)
            raise DuplicateItemError(f"id {dup!r} appears more than once in the batch")
        if n == 0:
            return []
        data = vecs.astype("<f4", copy=False).tobytes()
        with self._write_lock(name), self._db(name) as db:
            state = self._open(name, db)  # verified, under the writers' lock: n_rows cannot move
            n_rows, row_bytes = state.n_rows, 4 * info.dim
            path = self.root / name / VECTORS
            covered = integrity.covered_rows(db)
            blocks = integrity.legacy_blocks(path, info.dim, covered, n_rows) if covered < n_rows else []
            blocks.append((n_rows, n, integrity.crc32_rows(data)))
            self._append(name, path, n_rows * row_bytes, data)
            try:
                db.execute("BEGIN IMMEDIATE")
                db.executemany(
                    "INSERT INTO items (pos, id, payload) VALUES (?, ?, ?)",
                    zip(range(n_rows, n_rows + n), ids, payload_json, strict=True),
                )
                db.execute(integrity.BLOCKS_DDL)  # galleries made before checksums get the table now
                db.executemany("INSERT INTO blocks (start, n, crc32) VALUES (?, ?, ?)", blocks)
                db.execute("UPDATE counters SET value = ? WHERE key = 'n_rows'", (n_rows + n,))
                db.execute("COMMIT")
            except sqlite3.IntegrityError:
                db.execute("ROLLBACK")
                taken = _existing_ids(db, ids)
                raise DuplicateItemError(
                    f"gallery {name!r} already has item(s) {', '.join(map(repr, taken[:5]))}"
                ) from None
            self._mark_verified(name, state, n_rows + n)  # this process wrote (and fsynced) them
        return ids

    def _append(self, name: str, path: Path, end: int, data: bytes) -> None:
        """Write ``data`` at byte ``end`` (the acknowledged end) and fsync; an unacknowledged tail a crashed
        writer left is cut first. A file shorter than ``end`` is damage: refused, never padded with zeros."""
        try:
            f = open(path, "r+b")  # noqa: SIM115  (closed below)
        except FileNotFoundError:
            raise GalleryCorruptError(name, f"{VECTORS} is missing") from None
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < end:
                raise GalleryCorruptError(name, _short_reason(size, end))
            f.truncate(end)
            fd, view, done = f.fileno(), memoryview(data), 0
            try:  # unbuffered: nothing is left in a buffer to be written again when the file closes
                while done < len(view):
                    done += os.pwrite(fd, view[done:], end + done)
                os.fsync(fd)
            except OSError:  # e.g. out of space: give back what the failed write took, at once
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end)
                raise

    @_out_of_space_reported
    @_removal_reported
    def next_numbered_id(self, name: str) -> int:
        """The first free number for items numbered ``0, 1, 2...`` (``gallery build`` without ids): past every
        row ever acknowledged (deleted items' rows included) and past every live all-digit id, so numbering
        never collides after deletions, nor with digit ids added over HTTP."""
        with self._db(name) as db:
            state = self._open(name, db, scan=False)
            row = db.execute(
                "SELECT max(CAST(id AS INTEGER)) FROM items "
                "WHERE id NOT GLOB '*[^0-9]*' AND length(id) BETWEEN 1 AND 18"
            ).fetchone()
        high = row[0] if row is not None and isinstance(row[0], int) else -1
        return max(state.n_rows, high + 1)

    @_out_of_space_reported
    @_removal_reported
    def delete_item(self, name: str, item_id: str) -> None:
        """Tombstone one item. Raises ItemNotFoundError, GalleryNotFoundError, GalleryCorruptError."""
        with self._write_lock(name), self._db(name) as db:
            self._open(name, db)
            db.execute("BEGIN IMMEDIATE")
            cur = db.execute("DELETE FROM items WHERE id = ?", (str(item_id),))
            if cur.rowcount == 0:
                db.execute("ROLLBACK")
                raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
            db.execute("UPDATE counters SET value = value + 1 WHERE key = 'n_deleted'")
            db.execute("COMMIT")

    @_out_of_space_reported
    @_removal_reported
    def get_item(self, name: str, item_id: str, *, with_vector: bool = False) -> dict[str, Any]:
        """``{id, payload}`` (+ ``vector`` as float32 array) of one live item. Raises ItemNotFoundError,
        GalleryCorruptError."""
        with self._db(name) as db:
            state = self._open(name, db)
            row = db.execute("SELECT pos, payload FROM items WHERE id = ?", (str(item_id),)).fetchone()
        if row is None:
            raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
        item: dict[str, Any] = {"id": str(item_id), "payload": _load_payload(name, row[1])}
        if with_vector:
            item["vector"] = self._read_row(name, row[0], state)
        return item

    def _read_row(self, name: str, pos: int, state: _State) -> np.ndarray:
        dim = state.info.dim
        if not 0 <= pos < state.n_rows:
            raise GalleryCorruptError(name, f"an item points at row {pos}, past the {state.n_rows} rows")
        try:
            with open(self.root / name / VECTORS, "rb") as f:
                f.seek(pos * 4 * dim)
                data = f.read(4 * dim)
        except FileNotFoundError:
            raise GalleryCorruptError(name, f"{VECTORS} is missing") from None
        if len(data) < 4 * dim:
            raise GalleryCorruptError(name, f"{VECTORS} ends before row {pos} (truncated)")
        vector = np.frombuffer(data, dtype="<f4").astype(np.float32)
        if not np.isfinite(vector).all():
            raise GalleryCorruptError(name, f"row {pos} holds non-finite values")
        return vector

    # -- search -------------------------------------------------------------------------------------------
    def search(
        self,
        name: str,
        queries: np.ndarray,
        k: int = 10,
        *,
        query_kind: str,
        model: ModelRef | None = None,
    ) -> dict[str, Any]:
        """Exact top-k of the gallery for each query, scored with the model's own method.

        Args:
            queries: (dim,) or (Q, dim) embeddings of kind ``query_kind`` (captions | images).
            k: 1..MAX_K; fewer results come back when the gallery holds fewer live items.

        Returns:
            ``{"gallery", "score": {metric, direction, meaning}, "results": [[{id, score, payload}, ...]]}``,
            one best-first list per query; ties go to the earlier-inserted item.

        Raises:
            GalleryNotFoundError, GalleryMismatchError (model or kind), GalleryInputError (shape, k),
            GalleryCorruptError.
        """
        return self._search(name, queries, k, query_kind=query_kind, model=model, with_rows=False)

    @_out_of_space_reported
    @_removal_reported
    def _search(
        self,
        name: str,
        queries: np.ndarray,
        k: int,
        *,
        query_kind: str,
        model: ModelRef | None,
        with_rows: bool,
    ) -> dict[str, Any]:
        """``search``; with ``with_rows`` each hit also carries ``row``, its position in this store's vector
        file (a shard maps it to the gallery-wide position without looking the id up again)."""
        info, snap = self._snapshot(name)
        self._check_model(name, info, model=model)
        side = _query_side(info, query_kind)
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= MAX_K:
            raise GalleryInputError(f"k must be an integer in 1..{MAX_K}, got {k!r}")
        q = _as_matrix(queries, info.dim, what="query vectors", limit=MAX_QUERIES)
        if snap.vectors is None or q.shape[0] == 0:
            hits: builtins.list[builtins.list[dict[str, Any]]] = [[] for _ in range(q.shape[0])]
        else:
            found = top_k(
                q,
                snap.vectors,
                int(k),
                metric=info.metric,
                query_side=side,
                valid=snap.valid,
                kernel=get_kernel(self.scorer) if info.metric == "order_violation" else None,
            )
            hits = self._resolve(name, found.positions, found.scores, with_rows=with_rows)
        return {"gallery": name, "score": score_info(info.metric), "results": hits}

    def _resolve(
        self,
        name: str,
        positions: builtins.list[np.ndarray],
        scores: builtins.list[np.ndarray],
        *,
        with_rows: bool,
    ) -> builtins.list[builtins.list[dict[str, Any]]]:
        """Positions -> {id, score, payload} (and ``row``); an item deleted since the scan is dropped."""
        wanted = sorted({int(p) for row in positions for p in row})
        rows: dict[int, tuple[str, Any]] = {}
        with self._db(name) as db:
            for i in range(0, len(wanted), _SQL_VARS):
                part = wanted[i : i + _SQL_VARS]
                marks = ",".join("?" * len(part))
                for pos, item_id, payload in db.execute(
                    f"SELECT pos, id, payload FROM items WHERE pos IN ({marks})", part
                ):
                    rows[pos] = (item_id, _load_payload(name, payload))
        out = []
        for pos_row, score_row in zip(positions, scores, strict=True):
            hits = []
            for p, s in zip(pos_row.tolist(), score_row.tolist(), strict=True):
                if p in rows:
                    hit = {"id": rows[p][0], "score": s, "payload": rows[p][1]}
                    if with_rows:
                        hit["row"] = p
                    hits.append(hit)
            out.append(hits)
        return out

    def _snapshot(self, name: str) -> tuple[GalleryInfo, _Snapshot]:
        """The gallery's identity (opened and checked once per search) with the live-row mask and vector map
        of verified rows, refreshed incrementally when rows were only appended."""
        with self._gallery_lock(name), self._db(name) as db:
            db.execute("BEGIN")  # one consistent read of counters, checksums and items
            state = self._open(name, db)
            n_rows, n_deleted, key = state.n_rows, state.n_deleted, state.key
            old = self._snapshots.get(name)
            if old is not None and (old.key, old.n_rows, old.n_deleted) == (key, n_rows, n_deleted):
                db.execute("COMMIT")
                return state.info, old
            valid = np.zeros(n_rows, dtype=bool)
            since = 0
            if old is not None and old.key == key and old.n_deleted == n_deleted and old.n_rows <= n_rows:
                valid[: old.n_rows] = old.valid
                since = old.n_rows
            pos = np.fromiter(
                (r[0] for r in db.execute("SELECT pos FROM items WHERE pos >= ?", (since,))), dtype=np.int64
            )
            db.execute("COMMIT")
            if pos.size and (pos.min() < 0 or pos.max() >= n_rows):
                raise GalleryCorruptError(name, "an item points past the acknowledged rows")
            valid[pos] = True
            vectors = self._map_vectors(name, n_rows, state.info.dim)
            snap = _Snapshot(key, n_rows, n_deleted, valid, vectors)
            self._snapshots[name] = snap
            return state.info, snap

    def _map_vectors(self, name: str, n_rows: int, dim: int) -> np.ndarray | None:
        if n_rows == 0:
            return None
        try:  # copy-on-write: writable for torch.from_numpy, never written back
            return np.memmap(self.root / name / VECTORS, dtype="<f4", mode="c", shape=(n_rows, dim))
        except FileNotFoundError:
            raise GalleryCorruptError(name, f"{VECTORS} is missing") from None
        except ValueError as exc:  # shorter than the map (truncated since the check)
            raise GalleryCorruptError(name, f"{VECTORS} is truncated ({exc})") from None

    # -- opening: the checks every use goes through ----------------------------------------------------------
    def _open(self, name: str, db: sqlite3.Connection, *, scan: bool = True) -> _State:
        """Read the gallery's state and check it against its files; with ``scan``, verify the rows not yet
        verified by this process against their checksums, all in one read transaction (a consistent view of
        counters, items and checksums). Raises GalleryCorruptError."""
        if db.in_transaction:
            return self._open_in_txn(name, db, scan=scan)
        db.execute("BEGIN")
        try:
            state = self._open_in_txn(name, db, scan=scan)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return state

    def _open_in_txn(self, name: str, db: sqlite3.Connection, *, scan: bool) -> _State:
        info, n_rows, n_deleted = self._read_state(name, db)
        gdir = self.root / name
        if not (gdir / LOCK).is_file():
            raise GalleryCorruptError(name, f"{LOCK} is missing")
        try:
            st = os.stat(gdir / VECTORS)
        except FileNotFoundError:
            raise GalleryCorruptError(
                name, f"{VECTORS} is missing ({n_rows} rows are acknowledged)"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise GalleryCorruptError(name, f"{VECTORS} is not a regular file")
        if st.st_size < n_rows * 4 * info.dim:
            raise GalleryCorruptError(name, _short_reason(st.st_size, n_rows * 4 * info.dim))
        with _db_faults(name):
            row = db.execute("SELECT value FROM counters WHERE key = 'repairs'").fetchone()
        repairs = row[0] if row is not None and isinstance(row[0], int) else 0
        state = _State(info, n_rows, n_deleted, repairs, (st.st_dev, st.st_ino))
        self._verify(name, db, state, scan=scan)
        return state

    def _read_state(self, name: str, db: sqlite3.Connection) -> tuple[GalleryInfo, int, int]:
        """(info, n_rows, n_deleted) from the database, every value checked. Raises GalleryCorruptError."""
        with _db_faults(name):
            row = db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()
        if row is None:
            raise GalleryCorruptError(name, f"{DB} holds no gallery description")
        try:
            meta = json.loads(row[0])
        except (TypeError, ValueError):
            raise GalleryCorruptError(name, f"the gallery description in {DB} is not JSON") from None
        try:
            values = _meta_values(meta)
            with _db_faults(name):
                n_rows, n_deleted = _counters(db)
        except ValueError as exc:
            raise GalleryCorruptError(name, str(exc)) from None
        return GalleryInfo(name=name, **values, count=n_rows - n_deleted), n_rows, n_deleted

    def _verify(self, name: str, db: sqlite3.Connection, state: _State, *, scan: bool) -> None:
        """Verify rows once per process (then only new ones); a fault is remembered for as long as the
        gallery stays in that state, so a quarantined gallery is not re-read on every request."""
        key = state.key
        with self._gallery_lock(name):
            failed = self._failed.get(name)
            if failed is not None and failed[0] == (*key, state.n_rows):
                raise GalleryCorruptError(name, failed[1])
            if not scan:
                return
            done = self._verified.get(name)
            start = done[1] if done is not None and done[0] == key and done[1] <= state.n_rows else 0
            if done is not None and done[0] == key and start == state.n_rows:
                return
            fault = _items_fault(db, state.n_rows, state.n_deleted) if start == 0 else None
            if fault is None and start < state.n_rows:
                fault = integrity.scan(
                    db, self.root / name / VECTORS, state.info.dim, state.n_rows, start=start
                ).fault
            if fault is not None:
                self._failed[name] = ((*key, state.n_rows), fault)
                raise GalleryCorruptError(name, fault)
            self._verified[name] = (key, state.n_rows)

    def _mark_verified(self, name: str, state: _State, n_rows: int) -> None:
        key = state.key
        with self._gallery_lock(name):
            if self._verified.get(name) == (key, state.n_rows):
                self._verified[name] = (key, n_rows)

    def _record_legacy(self, name: str, db: sqlite3.Connection, state: _State) -> None:
        """Record checksums of verified rows written before checksums existed (caller holds the lock)."""
        covered = integrity.covered_rows(db)
        if covered >= state.n_rows:
            return
        blocks = integrity.legacy_blocks(self.root / name / VECTORS, state.info.dim, covered, state.n_rows)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(integrity.BLOCKS_DDL)
            db.executemany("INSERT INTO blocks (start, n, crc32) VALUES (?, ?, ?)", blocks)
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # read-only: the rows stay checked for finite values only
            if db.in_transaction:
                db.execute("ROLLBACK")
            log.warning("gallery %s: cannot record checksums of %d older rows (%s)", name, len(blocks), exc)
            return
        log.info("gallery %s: recorded checksums of rows %d-%d (written before checksums)", name, covered,
                 state.n_rows - 1)  # fmt: skip

    def _check_model(
        self, name: str, info: GalleryInfo, *, kind: str | None = None, model: ModelRef | None = None
    ) -> None:
        _check_compatible(info, kind=kind, model=model)
        if model is not None:
            self._adopt_identity(name, info, model)

    def _adopt_identity(self, name: str, info: GalleryInfo, model: ModelRef) -> None:
        """A gallery made before model identities, used with its model: pin the model's identity from now
        on, so exporting the model (which rewrites its manifest) no longer orphans the gallery."""
        if info.model_identity is not None or info.model_sha256 not in model.legacy_pins:
            return
        try:
            with self._db(name) as db:
                db.execute("BEGIN IMMEDIATE")
                meta = json.loads(db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()[0])
                if meta.get("model_identity") is not None:
                    db.execute("ROLLBACK")
                    return
                meta["model_identity"] = model.identity
                db.execute("UPDATE meta SET value = ? WHERE key = 'info'", (json.dumps(meta),))
                db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # read-only: it stays pinned to the manifest's bytes
            log.warning("gallery %s: cannot record its model identity (%s)", name, exc)
            return
        log.info("gallery %s: now pinned to model %s by identity %s", name, model.name, model.identity[:12])

    def _readable_info(self, name: str) -> GalleryInfo | None:
        """What a damaged gallery's database still says about it, if anything."""
        with (
            contextlib.suppress(GalleryCorruptError, GalleryNotFoundError, OSError, sqlite3.Error),
            self._db(name) as db,
        ):
            return self._read_state(name, db)[0]
        return None

    def _names(self) -> builtins.list[str]:
        """Directories under the root that hold gallery files, by name."""
        if not self.root.is_dir():
            return []
        names = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(".") or not _looks_like_gallery(path):
                continue
            if _NAME.fullmatch(path.name) is None:
                log.warning("ignoring %r in %s: not a valid gallery name (%s)", path.name, self.root,
                            GALLERY_NAME_RULE)  # fmt: skip
                continue
            names.append(path.name)
        return names

    def _forget(self, name: str) -> None:
        with self._gallery_lock(name):
            for cache in (self._snapshots, self._verified, self._failed):
                cache.pop(name, None)

    # -- plumbing -----------------------------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        check_gallery_name(name)
        return self.root / name

    def _dir_id(self, name: str) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the gallery's directory; None when absent (or the name is invalid)."""
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            return None
        try:
            st = os.stat(self.root / name)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    @contextlib.contextmanager
    def _removal_is_not_found(self, name: str) -> Iterator[None]:
        """See ``_removal_reported``."""
        before = self._dir_id(name)
        try:
            yield
        except (GalleryCorruptError, OSError, sqlite3.Error):
            if self._dir_id(name) == before:  # None == None: absent throughout, the use's own answer
                raise
            raise GalleryNotFoundError(f"no gallery named {name!r} (it was removed meanwhile)") from None

    def _gallery_lock(self, name: str) -> threading.RLock:
        with self._locks_lock:
            return self._locks.setdefault(name, threading.RLock())

    @contextlib.contextmanager
    def _db(self, name: str) -> Iterator[sqlite3.Connection]:
        """A connection to an existing gallery database (never creates one); corruption found while it is
        used is raised as GalleryCorruptError."""
        gdir = self._path(name)
        path = gdir / DB
        if not path.is_file():
            if _looks_like_gallery(gdir):
                raise GalleryCorruptError(
                    name, f"{DB} is missing" if not path.exists() else f"{DB} is not a file"
                )
            raise GalleryNotFoundError(f"no gallery named {name!r}")
        uri = f"{path.absolute().as_uri()}?mode=rw"
        try:
            db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
        except sqlite3.OperationalError:
            if not gdir.exists():
                raise GalleryNotFoundError(f"no gallery named {name!r}") from None
            raise
        try:
            with _db_faults(name):
                db.execute("PRAGMA synchronous=FULL")
                yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _write_lock(self, name: str, *, create: bool = False) -> Iterator[None]:
        path = self._path(name) / LOCK
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            if _looks_like_gallery(path.parent):
                raise GalleryCorruptError(name, f"{LOCK} is missing") from None
            raise GalleryNotFoundError(f"no gallery named {name!r}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # per open file description: excludes other threads too
            if not _same_file(fd, path):  # removed (or removed and made anew) while this waited
                raise GalleryNotFoundError(f"no gallery named {name!r} (it was removed meanwhile)")
            yield
        finally:
            os.close(fd)


# -- helpers ----------------------------------------------------------------------------------------------
def _init_db(path: Path, info: GalleryInfo) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("BEGIN")
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        db.execute("CREATE TABLE items (pos INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, payload TEXT)")
        db.execute(integrity.BLOCKS_DDL)
        db.execute("INSERT INTO meta VALUES ('info', ?)", (json.dumps(asdict(info)),))
        db.executemany("INSERT INTO counters VALUES (?, 0)", [("n_rows",), ("n_deleted",)])
        db.execute("COMMIT")
    finally:
        db.close()


_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "uid": str,
    "kind": str,
    "dim": int,
    "model": str,
    "model_sha256": str,
    "family": str,
    "method": str,
    "metric": str,
    "created_at": (int, float),
}
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _meta_values(meta: Any) -> dict[str, Any]:
    """The gallery description's fields, each value checked (it is read from disk: never trusted).
    Raises ValueError with the reason."""
    if not isinstance(meta, dict):
        raise ValueError(f"the gallery description in {DB} is not a JSON object")
    values: dict[str, Any] = {}
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"the gallery description has no valid {key!r} ({value!r:.40})")
        values[key] = value
    identity = meta.get("model_identity")
    if identity is not None and not (isinstance(identity, str) and _HEX64.fullmatch(identity)):
        raise ValueError(f"the gallery description has no valid 'model_identity' ({identity!r:.40})")
    try:
        metric = metric_for(values["method"], values["family"])
    except ValueError:
        metric = None
    problems = [
        (values["kind"] not in KINDS, "kind"),
        (not 1 <= values["dim"] <= MAX_DIM, "dim"),
        (values["family"] not in FAMILIES, "family"),
        (metric != values["metric"], "metric"),
        (values["family"] == "skip-thoughts" and values["kind"] != "captions", "kind"),
        (not math.isfinite(values["created_at"]), "created_at"),
        (not values["uid"], "uid"),
    ]
    bad = next((key for wrong, key in problems if wrong), None)
    if bad is not None:
        raise ValueError(f"the gallery description has no valid {bad!r} ({values[bad]!r:.40})")
    return {**values, "created_at": float(values["created_at"]), "model_identity": identity}


def _counters(db: sqlite3.Connection) -> tuple[int, int]:
    """(n_rows, n_deleted), checked. Raises ValueError."""
    found = dict(
        db.execute("SELECT key, value FROM counters WHERE key IN ('n_rows', 'n_deleted')").fetchall()
    )
    n_rows, n_deleted = found.get("n_rows"), found.get("n_deleted")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (n_rows, n_deleted))
    if not ints or not 0 <= n_deleted <= n_rows:  # type: ignore[operator]
        raise ValueError(f"its counters are invalid (n_rows {n_rows!r}, n_deleted {n_deleted!r})")
    return int(n_rows), int(n_deleted)  # type: ignore[arg-type]


def _items_fault(db: sqlite3.Connection, n_rows: int, n_deleted: int) -> str | None:
    """Why the items table disagrees with the counters, or None."""
    count, high = db.execute("SELECT count(*), max(pos) FROM items").fetchone()
    if count and (not isinstance(high, int) or high >= n_rows):
        return f"items point at rows up to {high}, past the {n_rows} acknowledged rows"
    if count != n_rows - n_deleted:
        return f"it holds {count} items but its counters say {n_rows - n_deleted}"
    return None


@contextlib.contextmanager
def _db_faults(name: str) -> Iterator[None]:
    """SQLite errors that mean the database is damaged, raised as GalleryCorruptError."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        reason = _db_fault(exc)
        if reason is None:
            raise
        raise GalleryCorruptError(name, reason) from None


def _db_fault(exc: sqlite3.DatabaseError) -> str | None:
    """The reason when an SQLite error means the database is damaged (not busy, locked or read-only)."""
    code = getattr(exc, "sqlite_errorcode", None)
    damaged = isinstance(code, int) and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    if damaged or str(exc).startswith(("no such table", "no such column")):
        return f"{DB} is unreadable ({exc})"
    return None


def _looks_like_gallery(path: Path) -> bool:
    """A directory holding any gallery file: one that lost its database is damaged, not absent."""
    return path.is_dir() and any(os.path.lexists(path / f) for f in (DB, VECTORS, LOCK))


def _short_reason(size: int, need: int) -> str:
    return (
        f"{VECTORS} holds {size} bytes, fewer than the {need} its acknowledged rows need "
        "(truncated; never padded)"
    )


def _creation_alive(path: Path) -> bool:
    """Whether a ``.NAME.creating-*`` directory belongs to a creation still running (its lock held)."""
    try:
        fd = os.open(path / LOCK, os.O_RDWR)
    except FileNotFoundError:  # the instant between mkdtemp and the lock, or a crash right then
        with contextlib.suppress(OSError):
            return time.time() - path.stat().st_mtime < _STALE_CREATING_S
        return False
    except OSError:
        return True  # cannot tell: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _existing_ids(db: sqlite3.Connection, ids: Sequence[str]) -> builtins.list[str]:
    taken: builtins.list[str] = []
    for i in range(0, len(ids), _SQL_VARS):
        part = list(ids[i : i + _SQL_VARS])
        marks = ",".join("?" * len(part))
        taken += [r[0] for r in db.execute(f"SELECT id FROM items WHERE id IN ({marks})", part)]
    return taken


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_gallery_name(name: Any) -> str:
    """``name`` if it is a valid gallery name (matched whole), else GalleryInputError."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise GalleryInputError(f"bad gallery name {name!r}: use {GALLERY_NAME_RULE}")
    return name


ITEM_ID_RULE = f"1-256 characters, {SEGMENT_RULE}"


def check_item_id(item_id: Any) -> str:
    """The id as stored, if a new item may take it: the one rule (store, HTTP route, CLI). An id must be
    addressable as one URL path segment (``/galleries/NAME/items/ID``); items stored before this rule with
    other ids stay reachable by ``?id=`` (``GET`` / ``DELETE /galleries/NAME/items?id=...``).

    Raises:
        GalleryInputError: not a string. InvalidItemIdError: empty, too long, not valid Unicode, or not
        addressable in a URL path.
    """
    if isinstance(item_id, bool) or not isinstance(item_id, str | int):
        raise GalleryInputError(f"item ids must be strings, got {type(item_id).__name__}")
    s = str(item_id)
    if not 1 <= len(s) <= 256:
        raise InvalidItemIdError(f"item ids must be 1-256 characters, got {len(s)}")
    try:
        _require_utf8(s, "item ids")
    except GalleryInputError as exc:
        raise InvalidItemIdError(str(exc)) from None
    fault = segment_fault(s)
    if fault is not None:
        raise InvalidItemIdError(f"bad item id {s!r:.80}: {fault}; use {ITEM_ID_RULE}")
    return s


def _require_utf8(text: str, what: str) -> None:
    """Lone UTF-16 surrogates (legal in JSON escapes) cannot be stored or sent back: refuse them up front."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise GalleryInputError(f"{what} must be valid Unicode (no lone surrogates)") from None


def _dump_payload(payload: Any) -> str | None:
    if payload is None:
        return None
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise GalleryInputError(f"payload is not JSON-serialisable ({exc})") from None
    _require_utf8(text, "payloads")
    return text


def _load_payload(name: str, text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        raise GalleryCorruptError(name, f"an item payload in {DB} is not JSON") from None


def _as_matrix(x: Any, dim: int, *, what: str, limit: int | None) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError):
        raise GalleryInputError(f"{what} must be numbers") from None
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise GalleryInputError(f"{what} must have shape (n, {dim}) for this gallery, got {np.shape(x)}")
    if limit is not None and arr.shape[0] > limit:
        raise GalleryInputError(f"at most {limit} {what} per request, got {arr.shape[0]}")
    if not np.isfinite(arr).all():
        raise GalleryInputError(f"{what} must be finite")
    return np.ascontiguousarray(arr)


def _check_compatible(info: GalleryInfo, *, kind: str | None = None, model: ModelRef | None = None) -> None:
    if kind is not None and kind != info.kind:
        raise GalleryMismatchError(f"gallery {info.name!r} holds {info.kind}, not {kind}")
    if model is not None and not model.matches(info):
        raise GalleryMismatchError(
            f"gallery {info.name!r} was embedded with model {info.model!r} ({_pin(info)}), "
            f"not {model.name!r} (identity {model.identity[:12]})"
        )


def _pin(info: GalleryInfo) -> str:
    """How a gallery pins its model, for messages."""
    if info.model_identity is not None:
        return f"identity {info.model_identity[:12]}"
    return f"manifest sha256 {info.model_sha256[:12]}"


def new_item_id() -> str:
    """A random item id (32 hex digits) for an item added without one: the one definition (store, routes)."""
    return uuid.uuid4().hex


def check_image_query(info: GalleryInfo) -> None:
    """The one statement of the rule that an image query needs a captions gallery (image->image is not an
    order-embedding score); the retrieve route applies it before encoding, the store before scanning.

    Raises:
        GalleryMismatchError: the gallery holds images.
    """
    if info.kind == "images":
        raise GalleryMismatchError(
            f"gallery {info.name!r} holds images: query it with captions (image->image is not defined)"
        )


def _query_side(info: GalleryInfo, query_kind: str) -> Side:
    """The slot of E(caption, image) the query fills: caption->images, image->captions, caption->captions."""
    if query_kind not in KINDS:
        raise GalleryInputError(f"query kind must be one of {', '.join(KINDS)}, got {query_kind!r}")
    if query_kind == "images":
        check_image_query(info)
    if query_kind == "images" and info.family == "skip-thoughts":
        raise GalleryMismatchError("skip-thoughts models have no image encoder")
    return "image" if query_kind == "images" else "caption"


__all__ = [
    "GALLERY_NAME_PATTERN",
    "GALLERY_NAME_RULE",
    "ITEM_ID_RULE",
    "KINDS",
    "MAX_K",
    "MAX_QUERIES",
    "CheckReport",
    "CorruptGallery",
    "GalleryEntry",
    "GalleryInfo",
    "GalleryStore",
    "ModelRef",
    "RepairReport",
    "check_gallery_name",
    "check_image_query",
    "check_item_id",
    "default_root",
    "new_item_id",
    "same_model",
]
