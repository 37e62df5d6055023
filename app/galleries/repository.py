"""``GalleryRepository``: the files of the galleries under one root, and nothing above them.

It owns the SQLite databases and the vector files (layout in ``lnserve.app.galleries.store``): connections,
the writers' lock, the reads of a gallery's state checked against its files, the durable append and its one
transaction, the memory map. It checks what the files say (a damaged file is ``GalleryCorruptError``), not
what a caller asks: the rules of a request are ``rules``', verification by checksum is the checker's
(``checks.GalleryChecker``), scoring the searcher's (``search.GallerySearcher``); the store in front
(``store.GalleryStore``) puts them together.
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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.storage import storage_full

from ...converters import bounded_json
from ..runtime.model_ref import ModelRef
from ..runtime.precisions import describe_identity
from . import integrity
from .errors import DuplicateItemError, GalleryCorruptError, GalleryNotFoundError, ItemNotFoundError
from .layout import DB, LOCK, VECTORS, GalleryInfo, State
from .rules import GALLERY_NAME_RULE, NAME_RE, NewItems, check_gallery_name, load_payload
from .sqlite_faults import (
    counters,
    creation_alive,
    db_faults,
    existing_ids,
    fsync_dir,
    init_db,
    looks_like_gallery,
    meta_values,
    rows_in,
    short_reason,
)

log = logging.getLogger("lnserve.galleries")


class GalleryRepository:
    """The galleries' files under ``root``: SQLite and the vector file. Thread-safe; processes share it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, threading.RLock] = {}
        self._locks_lock = threading.Lock()

    # -- galleries as directories -------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        """The gallery's directory (GalleryInputError: not a valid name)."""
        check_gallery_name(name)
        return self.root / name

    def names(self) -> builtins.list[str]:
        """Directories under the root that hold gallery files, by name."""
        if not self.root.is_dir():
            return []
        names = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(".") or not looks_like_gallery(path):
                continue
            if NAME_RE.fullmatch(path.name) is None:
                log.warning("ignoring %r in %s: not a valid gallery name (%s)", path.name, self.root,
                            GALLERY_NAME_RULE)  # fmt: skip
                continue
            names.append(path.name)
        return names

    def create(self, info: GalleryInfo) -> bool:
        """Make the gallery's files in a temporary directory, then rename it into place (made durable).
        False when the name was taken meanwhile (nothing is left behind)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{info.name}.creating-", dir=self.root))
        lock_fd = os.open(tmp / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)  # held until renamed: clean_leftovers leaves this one alone
            init_db(tmp / DB, info)
            with open(tmp / VECTORS, "wb") as f:
                os.fsync(f.fileno())
            os.fsync(lock_fd)
            tmp.chmod(0o755)
            try:
                os.rename(tmp, self.root / info.name)
            except OSError:
                return False
            fsync_dir(self.root)
        finally:
            os.close(lock_fd)
            shutil.rmtree(tmp, ignore_errors=True)
        return True

    def remove(self, name: str) -> None:
        """One atomic rename to ``.NAME.removed-*`` (made durable), waiting for a write in progress, then
        the files go. Raises GalleryNotFoundError."""
        path = self.path(name)
        trash = self.root / f".{name}.removed-{uuid.uuid4().hex}"
        lock = contextlib.nullcontext() if not (path / LOCK).is_file() else self.write_lock(name)
        try:
            with lock:
                os.rename(path, trash)
        except (FileNotFoundError, GalleryNotFoundError):
            raise GalleryNotFoundError(f"no gallery named {name!r}") from None
        fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)

    def clean_leftovers(self) -> builtins.list[str]:
        """Delete ``.NAME.creating-*`` (of no running creation) and ``.NAME.removed-*``; their names."""
        if not self.root.is_dir():
            return []
        removed = []
        for path in sorted(self.root.iterdir()):
            leftover = path.name.startswith(".") and path.is_dir() and not path.is_symlink()
            if not leftover:
                continue
            if ".removed-" in path.name or (".creating-" in path.name and not creation_alive(path)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
        return removed

    def dir_id(self, name: str) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the gallery's directory; None when absent (or the name is invalid)."""
        if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
            return None
        try:
            st = os.stat(self.root / name)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    @contextlib.contextmanager
    def removal_is_not_found(self, name: str) -> Iterator[None]:
        """A failure while the gallery's directory went away or was replaced is GalleryNotFoundError (see
        ``use_guards.removal_reported``)."""
        before = self.dir_id(name)
        try:
            yield
        except (GalleryCorruptError, OSError, sqlite3.Error):
            if self.dir_id(name) == before:  # None == None: absent throughout, the use's own answer
                raise
            raise GalleryNotFoundError(f"no gallery named {name!r} (it was removed meanwhile)") from None

    # -- locks and connections ----------------------------------------------------------------------------
    def gallery_lock(self, name: str) -> threading.RLock:
        """This process's lock of the gallery's caches (verification, snapshot)."""
        with self._locks_lock:
            return self._locks.setdefault(name, threading.RLock())

    @contextlib.contextmanager
    def db(self, name: str) -> Iterator[sqlite3.Connection]:
        """A connection to an existing gallery database (never creates one); corruption found while it is
        used is raised as GalleryCorruptError."""
        gdir = self.path(name)
        path = gdir / DB
        if not path.is_file():
            if looks_like_gallery(gdir):
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
            with db_faults(name):
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
            with db_faults(name):  # a damaged database: GalleryCorruptError, as at its first use
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
    def write_lock(self, name: str, *, create: bool = False) -> Iterator[None]:
        """``flock`` of the gallery's lock file: one writer at a time across threads and processes."""
        path = self.path(name) / LOCK
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            if looks_like_gallery(path.parent):
                raise GalleryCorruptError(name, f"{LOCK} is missing") from None
            raise GalleryNotFoundError(f"no gallery named {name!r}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # per open file description: excludes other threads too
            if not _same_file(fd, path):  # removed (or removed and made anew) while this waited
                raise GalleryNotFoundError(f"no gallery named {name!r} (it was removed meanwhile)")
            yield
        finally:
            os.close(fd)

    # -- state --------------------------------------------------------------------------------------------
    def read_info(self, name: str, db: sqlite3.Connection) -> tuple[GalleryInfo, int, int]:
        """(info, n_rows, n_deleted) from the database, every value checked. Raises GalleryCorruptError."""
        with db_faults(name):
            row = db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()
        if row is None:
            raise GalleryCorruptError(name, f"{DB} holds no gallery description")
        try:
            meta = bounded_json.loads(row[0])
        except (TypeError, ValueError):
            raise GalleryCorruptError(name, f"the gallery description in {DB} is not JSON") from None
        try:
            values = meta_values(meta)
            with db_faults(name):
                n_rows, n_deleted = counters(db)
        except ValueError as exc:
            raise GalleryCorruptError(name, str(exc)) from None
        return GalleryInfo(name=name, **values, count=n_rows - n_deleted), n_rows, n_deleted

    def read_state(self, name: str, db: sqlite3.Connection) -> State:
        """The database's state checked against the files (lock and vector file present, the vector file
        holding every acknowledged row); rows are not verified here. Raises GalleryCorruptError."""
        info, n_rows, n_deleted = self.read_info(name, db)
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
            raise GalleryCorruptError(name, short_reason(st.st_size, n_rows * 4 * info.dim))
        with db_faults(name):
            row = db.execute("SELECT value FROM counters WHERE key = 'repairs'").fetchone()
        repairs = row[0] if row is not None and isinstance(row[0], int) else 0
        return State(info, n_rows, n_deleted, repairs, (st.st_dev, st.st_ino))

    def readable_info(self, name: str) -> GalleryInfo | None:
        """What a damaged gallery's database still says about it, if anything."""
        with (
            contextlib.suppress(GalleryCorruptError, GalleryNotFoundError, OSError, sqlite3.Error),
            self.db(name) as db,
        ):
            return self.read_info(name, db)[0]
        return None

    def adopt_identity(self, name: str, info: GalleryInfo, model: ModelRef) -> None:
        """A gallery made before model identities, used with its model: pin the model's identity from now
        on, so exporting the model (which rewrites its manifest) no longer orphans the gallery."""
        if info.model_identity is not None or info.model_sha256 not in model.legacy_pins:
            return
        try:
            with self.db(name) as db:
                db.execute("BEGIN IMMEDIATE")
                row = db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()
                meta = bounded_json.loads(row[0])
                if meta.get("model_identity") is not None:
                    db.execute("ROLLBACK")
                    return
                meta["model_identity"] = model.identity_for(info.kind)
                db.execute("UPDATE meta SET value = ? WHERE key = 'info'", (json.dumps(meta),))
                db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # read-only: it stays pinned to the manifest's bytes
            log.warning("gallery %s: cannot record its model identity (%s)", name, exc)
            return
        log.info(
            "gallery %s: now pinned to model %s by identity %s",
            name,
            model.name,
            describe_identity(model.identity_for(info.kind)),
        )

    # -- items --------------------------------------------------------------------------------------------
    def append_items(self, db: sqlite3.Connection, state: State, items: NewItems, data: bytes) -> None:
        """Append the rows past the acknowledged end and fsync them, then ONE transaction inserts the items
        and the rows' checksum and advances ``n_rows`` (the acknowledgement). The caller holds the write
        lock and opened ``state`` under it. Raises DuplicateItemError (an id the gallery holds)."""
        name, n, info = state.info.name, len(items.ids), state.info
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
                zip(range(n_rows, n_rows + n), items.ids, items.payloads, strict=True),
            )
            db.execute(integrity.BLOCKS_DDL)  # galleries made before checksums get the table now
            db.executemany("INSERT INTO blocks (start, n, crc32) VALUES (?, ?, ?)", blocks)
            db.execute("UPDATE counters SET value = ? WHERE key = 'n_rows'", (n_rows + n,))
            db.execute("COMMIT")
        except sqlite3.IntegrityError:
            db.execute("ROLLBACK")
            taken = existing_ids(db, items.ids)
            raise DuplicateItemError(
                f"gallery {name!r} already has item(s) {', '.join(map(repr, taken[:5]))}"
            ) from None

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
                raise GalleryCorruptError(name, short_reason(size, end))
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

    @staticmethod
    def highest_numbered_id(db: sqlite3.Connection) -> int:
        """The largest live all-digit id (up to 18 digits), or -1."""
        row = db.execute(
            "SELECT max(CAST(id AS INTEGER)) FROM items "
            "WHERE id NOT GLOB '*[^0-9]*' AND length(id) BETWEEN 1 AND 18"
        ).fetchone()
        return row[0] if row is not None and isinstance(row[0], int) else -1

    @staticmethod
    def delete_item(name: str, db: sqlite3.Connection, item_id: str) -> None:
        """Tombstone one item in one transaction (the caller holds the write lock); ItemNotFoundError."""
        db.execute("BEGIN IMMEDIATE")
        cur = db.execute("DELETE FROM items WHERE id = ?", (str(item_id),))
        if cur.rowcount == 0:
            db.execute("ROLLBACK")
            raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
        db.execute("UPDATE counters SET value = value + 1 WHERE key = 'n_deleted'")
        db.execute("COMMIT")

    @staticmethod
    def item_row(db: sqlite3.Connection, item_id: str) -> tuple[int, Any] | None:
        """(row, stored payload) of a live item, or None."""
        row = db.execute("SELECT pos, payload FROM items WHERE id = ?", (str(item_id),)).fetchone()
        return None if row is None else (row[0], row[1])

    def read_row(self, name: str, pos: int, state: State) -> np.ndarray:
        """One acknowledged row of the vector file, checked finite. Raises GalleryCorruptError."""
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

    @staticmethod
    def live_rows(db: sqlite3.Connection, since: int) -> np.ndarray:
        """Rows of the live items at or past ``since``."""
        cur = db.execute("SELECT pos FROM items WHERE pos >= ?", (since,))
        return np.fromiter((r[0] for r in cur), dtype=np.int64)

    def items_at(self, name: str, rows: builtins.list[int]) -> dict[int, tuple[str, Any]]:
        """row -> (id, payload) of the live items at ``rows`` (one deleted meanwhile is absent)."""
        found: dict[int, tuple[str, Any]] = {}
        with self.db(name) as db:
            for pos, item_id, payload in rows_in(
                db, "SELECT pos, id, payload FROM items WHERE pos IN ({})", rows
            ):
                found[pos] = (item_id, load_payload(name, payload))
        return found

    def map_vectors(self, name: str, n_rows: int, dim: int) -> np.ndarray | None:
        """The acknowledged rows, memory-mapped copy-on-write (writable for torch.from_numpy, never written
        back); None for none. Raises GalleryCorruptError."""
        if n_rows == 0:
            return None
        try:
            return np.memmap(self.root / name / VECTORS, dtype="<f4", mode="c", shape=(n_rows, dim))
        except FileNotFoundError:
            raise GalleryCorruptError(name, f"{VECTORS} is missing") from None
        except ValueError as exc:  # shorter than the map (truncated since the check)
            raise GalleryCorruptError(name, f"{VECTORS} is truncated ({exc})") from None


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


__all__ = ["GalleryRepository"]
