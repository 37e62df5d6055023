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
import fcntl
import json
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.storage import storage_full

from ...converters import bounded_json
from ...converters.families import family_of
from ...converters.url_segment import SEGMENT_RULE, segment_fault
from ..runtime.model_ref import ModelRef
from ..runtime.retrieval import metric_for
from . import integrity
from .checks import GalleryChecks
from .errors import (
    DuplicateItemError,
    GalleryCorruptError,
    GalleryExistsError,
    GalleryInputError,
    GalleryMismatchError,
    GalleryNotFoundError,
    InvalidItemIdError,
    ItemNotFoundError,
)
from .layout import (
    DB,
    KINDS,
    LOCK,
    VECTORS,
    CorruptGallery,
    GalleryEntry,
    GalleryInfo,
    _Snapshot,
    _State,
    default_root,
)
from .rules import (
    _NAME,
    GALLERY_NAME_RULE,
    _as_matrix,
    _check_compatible,
    _dump_payload,
    _load_payload,
    _require_utf8,
    check_gallery_name,
    new_item_id,
)
from .search import GallerySearch
from .sqlite_faults import (
    _counters,
    _creation_alive,
    _db_faults,
    _existing_ids,
    _fsync_dir,
    _init_db,
    _looks_like_gallery,
    _meta_values,
    _short_reason,
)
from .use_guards import _out_of_space_reported, _removal_reported

log = logging.getLogger("lnserve.galleries")


class GalleryStore(GallerySearch, GalleryChecks):
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
        if kind not in family_of(model.family).gallery_kinds:
            raise GalleryMismatchError(f"{model.family} models embed text only: use kind 'captions'")
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
            meta = bounded_json.loads(row[0])
        except (TypeError, ValueError):
            raise GalleryCorruptError(name, f"the gallery description in {DB} is not JSON") from None
        try:
            values = _meta_values(meta)
            with _db_faults(name):
                n_rows, n_deleted = _counters(db)
        except ValueError as exc:
            raise GalleryCorruptError(name, str(exc)) from None
        return GalleryInfo(name=name, **values, count=n_rows - n_deleted), n_rows, n_deleted

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
                row = db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()
                meta = bounded_json.loads(row[0])
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
            db = self._connect(name, uri)
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

    def _connect(self, name: str, uri: str) -> sqlite3.Connection:
        """A connection that can read on a full disk. Opening a WAL database that no connection holds makes
        its WAL index (the ``-shm`` file, sized on first read), which fails without a free byte, so a read
        (``GET /galleries``, ``/info``, the front page) answered 507 for a write it never asked for. Then
        the connection is made again in exclusive locking mode, whose WAL index lives in heap memory: it
        reads as before (writes still fail, 507), and holds the file's lock only for its one use."""
        db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
        try:
            with _db_faults(name):  # a damaged database: GalleryCorruptError, as at its first use
                db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL index
            return db
        except sqlite3.OperationalError as exc:
            db.close()
            if storage_full(exc, f"gallery {name!r}", self.root) is None:
                raise
        except BaseException:
            db.close()
            raise
        log.warning("gallery %s: the disk is full; read without a shared WAL index", name)
        db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
        db.execute("PRAGMA locking_mode=EXCLUSIVE")  # before the first read: no -shm is ever made
        return db

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


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


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


__all__ = [
    "ITEM_ID_RULE",
    "GalleryStore",
    "ModelRef",
    "check_item_id",
]
