"""GalleryStore: named, persistent galleries of one model's embeddings, searched by exact brute force.

Layout of ``ROOT/NAME/``:

* ``gallery.sqlite`` (WAL, synchronous=FULL): ``meta`` (the gallery's identity: kind, dim, model name and
  manifest sha256, family, method), ``counters`` (``n_rows`` acknowledged vector rows, ``n_deleted``) and
  ``items`` (``pos`` = row in the vector file, unique string ``id``, JSON ``payload``).
* ``vectors.f32``: raw little-endian float32 rows, append-only, memory-mapped for scoring.
* ``write.lock``: ``flock`` serialising writers across threads and processes.

Why a kill -9 never loses or half-shows an item: a write appends its rows past ``n_rows`` and fsyncs the
vector file, then ONE SQLite transaction inserts the items and advances ``n_rows``; only that commit
acknowledges them. Rows past ``n_rows`` (a crash between the two steps) are invisible and the next write
truncates them. Readers see committed rows only. Deletes remove the item row (a tombstone: the vector row
stays, masked out of searches).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.app.galleries.errors import (
    DuplicateItemError,
    GalleryCorruptError,
    GalleryExistsError,
    GalleryInputError,
    GalleryMismatchError,
    GalleryNotFoundError,
    ItemNotFoundError,
)
from lnserve.app.runtime.retrieval import Side, get_kernel, metric_for, score_info, top_k
from lnserve.converters.artifact import MANIFEST
from lnserve.converters.hashing import sha256_file

KINDS = ("images", "captions")
MAX_K = 1000
MAX_QUERIES = 1024
DB, VECTORS, LOCK = "gallery.sqlite", "vectors.f32", "write.lock"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SQL_VARS = 500  # rows per IN (...) query, under SQLite's variable limit


def default_root() -> Path:
    """``LNSERVE_GALLERIES_DIR``, else ``~/.local/share/lnserve/galleries``."""
    env = os.environ.get("LNSERVE_GALLERIES_DIR")
    return Path(env).expanduser() if env else Path.home() / ".local" / "share" / "lnserve" / "galleries"


@dataclass(frozen=True)
class ModelRef:
    """The identity of the model that embeds a gallery's items: queries must come from the same one."""

    name: str
    sha256: str  # of the artifact's manifest.json, which pins every weight file by hash
    family: str
    method: str
    dim: int

    @classmethod
    def from_artifact(cls, artifact: Any) -> ModelRef:
        m = artifact.manifest
        method = "cosine" if artifact.family == "skip-thoughts" else m["options"]["method"]
        return cls(
            name=artifact.name,
            sha256=sha256_file(artifact.path / MANIFEST),
            family=artifact.family,
            method=method,
            dim=int(m["dims"]["output_dim"]),
        )


@dataclass(frozen=True)
class GalleryInfo:
    name: str
    uid: str
    kind: str
    dim: int
    model: str
    model_sha256: str
    family: str
    method: str
    metric: str
    created_at: float
    count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "score": score_info(self.metric)}


@dataclass
class _Snapshot:
    """Per-gallery search state cached between queries: which rows are live, and the vector map."""

    uid: str
    n_rows: int
    n_deleted: int
    valid: np.ndarray
    vectors: np.ndarray | None


class GalleryStore:
    """All galleries under one root directory. Thread-safe; several processes may share a root."""

    def __init__(self, root: Path | str | None = None, *, scorer: str | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.scorer = scorer
        self._snapshots: dict[str, _Snapshot] = {}
        self._snap_lock = threading.Lock()

    # -- galleries ----------------------------------------------------------------------------------------
    def create(self, name: str, *, kind: str, model: ModelRef, exist_ok: bool = False) -> GalleryInfo:
        """Create an empty gallery of ``kind`` (images | captions) for ``model``.

        Raises:
            GalleryInputError: bad name or kind. GalleryExistsError: the name is taken (unless ``exist_ok``
            and the existing gallery has the same kind and model).
        """
        _check_name(name)
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
            model_sha256=model.sha256,
            family=model.family,
            method=model.method,
            metric=metric_for(model.method, model.family),
            created_at=time.time(),
        )
        try:
            _init_db(tmp / DB, info)
            for fname in (VECTORS, LOCK):
                with open(tmp / fname, "wb") as f:
                    os.fsync(f.fileno())
            tmp.chmod(0o755)
            try:
                os.rename(tmp, final)
            except OSError:
                return self._existing(name, kind, model, exist_ok)
            _fsync_dir(self.root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return info

    def _existing(self, name: str, kind: str, model: ModelRef, exist_ok: bool) -> GalleryInfo:
        info = self.get(name)
        if not exist_ok:
            raise GalleryExistsError(f"gallery {name!r} already exists")
        if info.kind != kind or info.model_sha256 != model.sha256:
            raise GalleryExistsError(f"gallery {name!r} exists with another kind or model")
        return info

    def get(self, name: str) -> GalleryInfo:
        """The gallery's identity and live item count. Raises GalleryNotFoundError."""
        with self._db(name) as db:
            return _read_info(db)

    def list(self) -> list[GalleryInfo]:
        """Every gallery under the root, by name."""
        if not self.root.is_dir():
            return []
        out = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(".") or not (path / DB).is_file():
                continue
            with contextlib.suppress(GalleryNotFoundError):  # removed meanwhile
                out.append(self.get(path.name))
        return out

    def remove(self, name: str) -> None:
        """Delete a gallery and its files. Raises GalleryNotFoundError."""
        path = self._path(name)
        trash = self.root / f".{name}.removed-{uuid.uuid4().hex}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            raise GalleryNotFoundError(f"no gallery named {name!r}") from None
        _fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)
        with self._snap_lock:
            self._snapshots.pop(name, None)

    # -- items --------------------------------------------------------------------------------------------
    def add_items(
        self,
        name: str,
        vectors: np.ndarray,
        *,
        ids: Sequence[str] | None = None,
        payloads: Sequence[Any] | None = None,
        kind: str | None = None,
        model: ModelRef | None = None,
    ) -> list[str]:
        """Append embedded items durably; returns their ids once acknowledged (committed).

        Args:
            vectors: (n, dim) embeddings from the gallery's model (encode text / features first).
            ids: unique string ids (default: random hex). payloads: JSON-serialisable values or None.
            kind, model: when given, checked against the gallery (GalleryMismatchError).

        Raises:
            GalleryInputError (shape, non-finite values, bad ids/payloads), DuplicateItemError,
            GalleryNotFoundError, GalleryMismatchError.
        """
        info = self.get(name)
        _check_compatible(info, kind=kind, model=model)
        vecs = _as_matrix(vectors, info.dim, what="item vectors", limit=None)
        n = vecs.shape[0]
        ids = [uuid.uuid4().hex for _ in range(n)] if ids is None else [_check_id(i) for i in ids]
        payload_json = [None] * n if payloads is None else [_dump_payload(p) for p in payloads]
        if len(ids) != n or len(payload_json) != n:
            raise GalleryInputError(f"{n} vectors but {len(ids)} ids and {len(payload_json)} payloads")
        if len(set(ids)) != n:
            dup = next(i for i in ids if ids.count(i) > 1)
            raise DuplicateItemError(f"id {dup!r} appears more than once in the batch")
        if n == 0:
            return []
        row_bytes = 4 * info.dim
        with self._write_lock(name), self._db(name) as db:
            n_rows = _counter(db, "n_rows")
            with open(self._path(name) / VECTORS, "r+b") as f:
                f.truncate(n_rows * row_bytes)  # drop rows a crashed writer left unacknowledged
                f.seek(n_rows * row_bytes)
                f.write(vecs.astype("<f4", copy=False).tobytes())
                f.flush()
                os.fsync(f.fileno())
            try:
                db.execute("BEGIN IMMEDIATE")
                db.executemany(
                    "INSERT INTO items (pos, id, payload) VALUES (?, ?, ?)",
                    zip(range(n_rows, n_rows + n), ids, payload_json, strict=True),
                )
                db.execute("UPDATE counters SET value = ? WHERE key = 'n_rows'", (n_rows + n,))
                db.execute("COMMIT")
            except sqlite3.IntegrityError:
                db.execute("ROLLBACK")
                taken = _existing_ids(db, ids)
                raise DuplicateItemError(
                    f"gallery {name!r} already has item(s) {', '.join(map(repr, taken[:5]))}"
                ) from None
        return ids

    def delete_item(self, name: str, item_id: str) -> None:
        """Tombstone one item. Raises ItemNotFoundError, GalleryNotFoundError."""
        with self._write_lock(name), self._db(name) as db:
            db.execute("BEGIN IMMEDIATE")
            cur = db.execute("DELETE FROM items WHERE id = ?", (str(item_id),))
            if cur.rowcount == 0:
                db.execute("ROLLBACK")
                raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
            db.execute("UPDATE counters SET value = value + 1 WHERE key = 'n_deleted'")
            db.execute("COMMIT")

    def get_item(self, name: str, item_id: str, *, with_vector: bool = False) -> dict[str, Any]:
        """``{id, payload}`` (+ ``vector`` as float32 array) of one live item. Raises ItemNotFoundError."""
        with self._db(name) as db:
            info = _read_info(db)
            row = db.execute("SELECT pos, payload FROM items WHERE id = ?", (str(item_id),)).fetchone()
        if row is None:
            raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
        item: dict[str, Any] = {"id": str(item_id), "payload": _load_payload(row[1])}
        if with_vector:
            with open(self._path(name) / VECTORS, "rb") as f:
                f.seek(row[0] * 4 * info.dim)
                item["vector"] = np.frombuffer(f.read(4 * info.dim), dtype="<f4").astype(np.float32)
        return item

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
            GalleryNotFoundError, GalleryMismatchError (model or kind), GalleryInputError (shape, k).
        """
        info = self.get(name)
        _check_compatible(info, model=model)
        side = _query_side(info, query_kind)
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= MAX_K:
            raise GalleryInputError(f"k must be an integer in 1..{MAX_K}, got {k!r}")
        q = _as_matrix(queries, info.dim, what="query vectors", limit=MAX_QUERIES)
        snap = self._snapshot(name, info)
        if snap.vectors is None or q.shape[0] == 0:
            hits = [[] for _ in range(q.shape[0])]
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
            hits = self._resolve(name, found.positions, found.scores)
        return {"gallery": name, "score": score_info(info.metric), "results": hits}

    def _resolve(
        self, name: str, positions: list[np.ndarray], scores: list[np.ndarray]
    ) -> list[list[dict[str, Any]]]:
        """Positions -> {id, score, payload}; an item deleted since the scan is dropped."""
        wanted = sorted({int(p) for row in positions for p in row})
        rows: dict[int, tuple[str, Any]] = {}
        with self._db(name) as db:
            for i in range(0, len(wanted), _SQL_VARS):
                part = wanted[i : i + _SQL_VARS]
                marks = ",".join("?" * len(part))
                for pos, item_id, payload in db.execute(
                    f"SELECT pos, id, payload FROM items WHERE pos IN ({marks})", part
                ):
                    rows[pos] = (item_id, _load_payload(payload))
        return [
            [
                {"id": rows[int(p)][0], "score": float(s), "payload": rows[int(p)][1]}
                for p, s in zip(pos_row, score_row, strict=True)
                if int(p) in rows
            ]
            for pos_row, score_row in zip(positions, scores, strict=True)
        ]

    def _snapshot(self, name: str, info: GalleryInfo) -> _Snapshot:
        """Live-row mask and vector map, refreshed incrementally when rows were only appended."""
        with self._snap_lock, self._db(name) as db:
            db.execute("BEGIN")  # one consistent read of counters and items
            n_rows, n_deleted = _counter(db, "n_rows"), _counter(db, "n_deleted")
            old = self._snapshots.get(name)
            if old is not None and (old.uid, old.n_rows, old.n_deleted) == (info.uid, n_rows, n_deleted):
                db.execute("COMMIT")
                return old
            valid = np.zeros(n_rows, dtype=bool)
            since = 0
            appended_only = old is not None and old.uid == info.uid and old.n_deleted == n_deleted
            if old is not None and appended_only and old.n_rows <= n_rows:
                valid[: old.n_rows] = old.valid
                since = old.n_rows
            pos = np.fromiter(
                (r[0] for r in db.execute("SELECT pos FROM items WHERE pos >= ?", (since,))), dtype=np.int64
            )
            db.execute("COMMIT")
            valid[pos] = True
            snap = _Snapshot(info.uid, n_rows, n_deleted, valid, self._map_vectors(name, n_rows, info.dim))
            self._snapshots[name] = snap
            return snap

    def _map_vectors(self, name: str, n_rows: int, dim: int) -> np.ndarray | None:
        if n_rows == 0:
            return None
        path = self._path(name) / VECTORS
        if path.stat().st_size < n_rows * dim * 4:
            raise GalleryCorruptError(f"{path}: shorter than the {n_rows} rows the database acknowledges")
        # copy-on-write: writable for torch.from_numpy, never written back
        return np.memmap(path, dtype="<f4", mode="c", shape=(n_rows, dim))

    # -- plumbing -----------------------------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        _check_name(name)
        return self.root / name

    @contextlib.contextmanager
    def _db(self, name: str) -> Iterator[sqlite3.Connection]:
        path = self._path(name) / DB
        if not path.is_file():
            raise GalleryNotFoundError(f"no gallery named {name!r}")
        db = sqlite3.connect(path, timeout=60, isolation_level=None)
        try:
            db.execute("PRAGMA synchronous=FULL")
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _write_lock(self, name: str) -> Iterator[None]:
        try:
            fd = os.open(self._path(name) / LOCK, os.O_RDWR)
        except FileNotFoundError:
            raise GalleryNotFoundError(f"no gallery named {name!r}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # per open file description: excludes other threads too
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
        db.execute("INSERT INTO meta VALUES ('info', ?)", (json.dumps(asdict(info)),))
        db.executemany("INSERT INTO counters VALUES (?, 0)", [("n_rows",), ("n_deleted",)])
        db.execute("COMMIT")
    finally:
        db.close()


def _read_info(db: sqlite3.Connection) -> GalleryInfo:
    meta = json.loads(db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()[0])
    meta["count"] = _counter(db, "n_rows") - _counter(db, "n_deleted")  # kept in step by every write
    return GalleryInfo(**meta)


def _counter(db: sqlite3.Connection, key: str) -> int:
    return int(db.execute("SELECT value FROM counters WHERE key = ?", (key,)).fetchone()[0])


def _existing_ids(db: sqlite3.Connection, ids: Sequence[str]) -> list[str]:
    taken: list[str] = []
    for i in range(0, len(ids), _SQL_VARS):
        part = list(ids[i : i + _SQL_VARS])
        marks = ",".join("?" * len(part))
        taken += [r[0] for r in db.execute(f"SELECT id FROM items WHERE id IN ({marks})", part)]
    return taken


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise GalleryInputError(
            f"bad gallery name {name!r}: use 1-128 letters, digits, '.', '_' or '-', starting alphanumeric"
        )


def _check_id(item_id: Any) -> str:
    if isinstance(item_id, bool) or not isinstance(item_id, str | int):
        raise GalleryInputError(f"item ids must be strings, got {type(item_id).__name__}")
    s = str(item_id)
    if not 1 <= len(s) <= 256:
        raise GalleryInputError(f"item ids must be 1-256 characters, got {len(s)}")
    _require_utf8(s, "item ids")
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


def _load_payload(text: str | None) -> Any:
    return None if text is None else json.loads(text)


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
    if model is not None and model.sha256 != info.model_sha256:
        raise GalleryMismatchError(
            f"gallery {info.name!r} was embedded with model {info.model!r} "
            f"(manifest sha256 {info.model_sha256[:12]}), not {model.name!r} ({model.sha256[:12]})"
        )


def _query_side(info: GalleryInfo, query_kind: str) -> Side:
    """The slot of E(caption, image) the query fills: caption->images, image->captions, caption->captions."""
    if query_kind not in KINDS:
        raise GalleryInputError(f"query kind must be one of {', '.join(KINDS)}, got {query_kind!r}")
    if query_kind == "images" and info.kind == "images":
        raise GalleryMismatchError(
            f"gallery {info.name!r} holds images: query it with captions (image->image is not defined)"
        )
    if query_kind == "images" and info.family == "skip-thoughts":
        raise GalleryMismatchError("skip-thoughts models have no image encoder")
    return "image" if query_kind == "images" else "caption"


__all__ = ["KINDS", "MAX_K", "MAX_QUERIES", "GalleryInfo", "GalleryStore", "ModelRef", "default_root"]
