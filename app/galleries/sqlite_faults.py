"""SQLite access and fault classification: the schema, reading the counters and metadata, and what a damaged
file looks like (each fault becomes one reason)."""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...converters.families import FAMILIES, may_hold
from ..runtime.precisions import IDENTITY
from ..runtime.retrieval import metric_for
from . import integrity
from .errors import (
    GalleryCorruptError,
)
from .layout import (
    DB,
    KINDS,
    LOCK,
    MAX_DIM,
    VECTORS,
    GalleryInfo,
)

SQL_VARS = 500  # rows per IN (...) query, under SQLite's variable limit


_STALE_CREATING_S = 600.0  # a creating directory with no lock file this old was left by a crash


_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


MALFORMED_BLOCK = "typeof(n) != 'integer' OR typeof(crc32) != 'integer'"


# -- helpers ----------------------------------------------------------------------------------------------
def init_db(path: Path, info: GalleryInfo) -> None:
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


def meta_values(meta: Any) -> dict[str, Any]:
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
    if identity is not None and not (isinstance(identity, str) and IDENTITY.fullmatch(identity)):
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
        (not may_hold(values["family"], values["kind"]), "kind"),
        (not math.isfinite(values["created_at"]), "created_at"),
        (not values["uid"], "uid"),
    ]
    bad = next((key for wrong, key in problems if wrong), None)
    if bad is not None:
        raise ValueError(f"the gallery description has no valid {bad!r} ({values[bad]!r:.40})")
    return {**values, "created_at": float(values["created_at"]), "model_identity": identity}


def counters(db: sqlite3.Connection) -> tuple[int, int]:
    """(n_rows, n_deleted), checked. Raises ValueError."""
    found = dict(
        db.execute("SELECT key, value FROM counters WHERE key IN ('n_rows', 'n_deleted')").fetchall()
    )
    n_rows, n_deleted = found.get("n_rows"), found.get("n_deleted")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (n_rows, n_deleted))
    if not ints or not 0 <= n_deleted <= n_rows:  # type: ignore[operator]
        raise ValueError(f"its counters are invalid (n_rows {n_rows!r}, n_deleted {n_deleted!r})")
    return int(n_rows), int(n_deleted)  # type: ignore[arg-type]


def items_fault(db: sqlite3.Connection, n_rows: int, n_deleted: int) -> str | None:
    """Why the items table disagrees with the counters, or None."""
    count, high = db.execute("SELECT count(*), max(pos) FROM items").fetchone()
    if count and (not isinstance(high, int) or high >= n_rows):
        return f"items point at rows up to {high}, past the {n_rows} acknowledged rows"
    if count != n_rows - n_deleted:
        return f"it holds {count} items but its counters say {n_rows - n_deleted}"
    return None


@contextlib.contextmanager
def db_faults(name: str) -> Iterator[None]:
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


def looks_like_gallery(path: Path) -> bool:
    """A directory holding any gallery file: one that lost its database is damaged, not absent."""
    return path.is_dir() and any(os.path.lexists(path / f) for f in (DB, VECTORS, LOCK))


def short_reason(size: int, need: int) -> str:
    return (
        f"{VECTORS} holds {size} bytes, fewer than the {need} its acknowledged rows need "
        "(truncated; never padded)"
    )


def creation_alive(path: Path) -> bool:
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


def rows_in(db: sqlite3.Connection, sql: str, keys: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of ``sql`` (one ``IN ({})`` placeholder) for every key, queried ``SQL_VARS`` keys at a
    time: the one loop that keeps an ``IN (...)`` list under SQLite's variable limit."""
    for i in range(0, len(keys), SQL_VARS):
        part = list(keys[i : i + SQL_VARS])
        yield from db.execute(sql.format(",".join("?" * len(part))), part)


def existing_ids(db: sqlite3.Connection, ids: Sequence[str]) -> builtins.list[str]:
    return [r[0] for r in rows_in(db, "SELECT id FROM items WHERE id IN ({})", ids)]


def item_positions(db: sqlite3.Connection, ids: Sequence[str]) -> dict[str, int]:
    """The vector row of each live item among ``ids`` (absent ones are left out)."""
    return {r[0]: r[1] for r in rows_in(db, "SELECT id, pos FROM items WHERE id IN ({})", ids)}


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
