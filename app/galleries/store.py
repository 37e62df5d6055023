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

Who does what: ``GalleryRepository`` (``repository.py``) owns the files, ``GalleryChecker`` (``checks.py``)
opens and verifies a gallery for every use and checks the model rule, ``GallerySearcher`` (``search.py``)
scores; ``GalleryStore`` here is the thin front that puts one use together, under the guards of
``use_guards``.
"""

from __future__ import annotations

import builtins
import logging
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.errors import StorageFullError
from lnserve.storage import storage_full

from ...converters.families import family_of
from ..runtime.model_ref import ModelRef
from ..runtime.retrieval import metric_for
from .checks import GalleryChecker
from .errors import (
    GalleryCorruptError,
    GalleryExistsError,
    GalleryInputError,
    GalleryMismatchError,
    GalleryNotFoundError,
    ItemNotFoundError,
)
from .layout import (
    KINDS,
    AddedItems,
    CheckReport,
    CorruptGallery,
    GalleryEntry,
    GalleryInfo,
    RepairReport,
    default_root,
)
from .repository import GalleryRepository
from .rules import (
    ITEM_ID_RULE,
    as_matrix,
    check_compatible,
    check_gallery_name,
    check_item_id,
    load_payload,
    new_items,
)
from .search import GallerySearcher
from .sqlite_faults import counters, existing_ids, item_positions
from .use_guards import out_of_space_reported, removal_reported

log = logging.getLogger("lnserve.galleries")


class GalleryStore:
    """All galleries under one root directory. Thread-safe; several processes may share a root."""

    def __init__(self, root: Path | str | None = None, *, scorer: str | None = None) -> None:
        self.repo = GalleryRepository(Path(root).expanduser() if root is not None else default_root())
        self.checker = GalleryChecker(self.repo)
        self.searcher = GallerySearcher(self.repo, self.checker, scorer)

    @property
    def root(self) -> Path:
        """Where the galleries live."""
        return self.repo.root

    @property
    def scorer(self) -> str | None:
        """The order-violation kernel searches use (the ``scorer`` setting)."""
        return self.searcher.scorer

    # -- galleries ----------------------------------------------------------------------------------------
    @out_of_space_reported
    def create(self, name: str, *, kind: str, model: ModelRef, exist_ok: bool = False) -> GalleryInfo:
        """Create an empty gallery of ``kind`` (images | captions) for ``model``.

        Raises:
            GalleryInputError: bad name or kind. GalleryExistsError: the name is taken (unless ``exist_ok``).
            GalleryMismatchError: ``exist_ok``, and the existing gallery has another kind, model or precision.
        """
        check_gallery_name(name)
        if kind not in KINDS:
            raise GalleryInputError(f"gallery kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if kind not in family_of(model.family).gallery_kinds:
            raise GalleryMismatchError(f"{model.family} models embed text only: use kind 'captions'")
        if (self.root / name).exists():
            return self._existing(name, kind, model, exist_ok)
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
            model_identity=model.identity_for(kind),
        )
        return info if self.repo.create(info) else self._existing(name, kind, model, exist_ok)

    def _existing(self, name: str, kind: str, model: ModelRef, exist_ok: bool) -> GalleryInfo:
        info = self.get(name)
        if not exist_ok:
            raise GalleryExistsError(f"gallery {name!r} already exists")
        check_compatible(info, kind=kind, model=model)  # gallery_mismatch, naming what differs
        self.repo.adopt_identity(name, info, model)
        return info

    @out_of_space_reported
    @removal_reported
    def get(self, name: str) -> GalleryInfo:
        """The gallery's identity and live item count.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: the gallery is damaged (quarantined).
        """
        with self.repo.db(name) as db:
            return self.checker.open(name, db).info

    def list(self) -> builtins.list[GalleryEntry]:
        """Every gallery under the root, by name; a damaged one as a ``CorruptGallery`` with its reason.
        Cheap: checksums are not verified here (``verify_all`` does), but a fault found earlier is shown."""
        out: builtins.list[GalleryEntry] = []
        for name in self.repo.names():
            try:
                with self.repo.removal_is_not_found(name), self.repo.db(name) as db:
                    out.append(self.checker.open(name, db, scan=False).info)
            except GalleryNotFoundError:
                continue  # removed meanwhile
            except GalleryCorruptError as exc:
                out.append(CorruptGallery(name, exc.reason, self.repo.readable_info(name)))
            except (OSError, sqlite3.Error) as exc:  # e.g. permissions: not servable either
                if (full := storage_full(exc, f"gallery {name!r}", self.root)) is not None:
                    raise full from None  # SQLite cannot open a database on a full disk: not damage
                out.append(CorruptGallery(name, f"cannot be read ({type(exc).__name__}: {exc})"))
        return out

    @out_of_space_reported
    def remove(self, name: str) -> None:
        """Delete a gallery and its files (a damaged one too); ``DELETE /galleries/NAME`` and ``lnserve
        gallery rm`` both come here. Crash-safe: one atomic rename to ``.NAME.removed-*`` (made durable) takes
        the gallery away whole, then the files go; a crash in between leaves a leftover that no listing shows
        and ``clean_leftovers`` deletes. The rename waits for a write in progress (the gallery's write lock),
        so an add is either acknowledged before the removal or fails with gallery_not_found.

        Raises:
            GalleryNotFoundError: no gallery of that name.
        """
        self.repo.remove(name)
        self._forget(name)

    def clean_leftovers(self) -> builtins.list[str]:
        """Delete what crashed creations and removals left in the root (``.NAME.creating-*``,
        ``.NAME.removed-*``); a creation still in progress in another process (its lock held) is left alone.
        Returns the names deleted."""
        return self.repo.clean_leftovers()

    # -- items --------------------------------------------------------------------------------------------
    @out_of_space_reported
    @removal_reported
    def add(
        self,
        name: str,
        vectors: np.ndarray,
        *,
        ids: Sequence[str] | None = None,
        payloads: Sequence[Any] | None = None,
        kind: str | None = None,
        model: ModelRef | None = None,
    ) -> AddedItems:
        """Append embedded items durably: their ids and the gallery's live count once they are acknowledged
        (committed). The gallery is opened once, under the writers' lock, and each rule checked once (ids
        given as ``rules.ItemIds`` were checked already).

        Args:
            vectors: (n, dim) embeddings from the gallery's model (encode text / features first).
            ids: unique string ids (default: random hex). payloads: JSON-serialisable values or None.
            kind, model: when given, checked against the gallery (GalleryMismatchError).

        Raises:
            GalleryInputError (shape, non-finite values, bad ids/payloads), DuplicateItemError,
            GalleryNotFoundError, GalleryMismatchError, GalleryCorruptError (nothing is written).
        """
        with self.repo.write_lock(name), self.repo.db(name) as db:
            state = self.checker.open(name, db)  # verified, under the writers' lock: n_rows cannot move
            info = state.info
            self.checker.check_model(name, info, kind=kind, model=model)
            vecs = as_matrix(vectors, info.dim, what="item vectors", limit=None)
            items = new_items(vecs.shape[0], ids, payloads)
            n = len(items.ids)
            if n:
                self.repo.append_items(db, state, items, vecs.astype("<f4", copy=False).tobytes())
                self.checker.mark_verified(name, state, state.n_rows + n)  # this process wrote them
        return AddedItems(list(items.ids), info.count + n)

    @out_of_space_reported
    @removal_reported
    def next_numbered_id(self, name: str) -> int:
        """The first free number for items numbered ``0, 1, 2...`` (``gallery build`` without ids): past every
        row ever acknowledged (deleted items' rows included) and past every live all-digit id, so numbering
        never collides after deletions, nor with digit ids added over HTTP."""
        with self.repo.db(name) as db:
            state = self.checker.open(name, db, scan=False)
            high = self.repo.highest_numbered_id(db)
        return max(state.n_rows, high + 1)

    @out_of_space_reported
    @removal_reported
    def delete_item(self, name: str, item_id: str) -> None:
        """Tombstone one item. Raises ItemNotFoundError, GalleryNotFoundError, GalleryCorruptError."""
        with self.repo.write_lock(name), self.repo.db(name) as db:
            self.checker.open(name, db)
            self.repo.delete_item(name, db, item_id)

    @out_of_space_reported
    @removal_reported
    def get_item(self, name: str, item_id: str, *, with_vector: bool = False) -> dict[str, Any]:
        """``{id, payload}`` (+ ``vector`` as float32 array) of one live item. Raises ItemNotFoundError,
        GalleryCorruptError."""
        with self.repo.db(name) as db:
            state = self.checker.open(name, db)
            row = self.repo.item_row(db, item_id)
        if row is None:
            raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
        item: dict[str, Any] = {"id": str(item_id), "payload": load_payload(name, row[1])}
        if with_vector:
            item["vector"] = self.repo.read_row(name, row[0], state)
        return item

    # -- search -------------------------------------------------------------------------------------------
    @out_of_space_reported
    @removal_reported
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
        return self.searcher.search(name, queries, k, query_kind=query_kind, model=model, with_rows=False)

    @out_of_space_reported
    @removal_reported
    def search_rows(
        self, name: str, queries: np.ndarray, k: int, *, query_kind: str, model: ModelRef | None
    ) -> dict[str, Any]:
        """``search``, each hit also with ``row``, its position in this store's vector file (a shard maps it
        to the gallery-wide position without looking the id up again)."""
        return self.searcher.search(name, queries, k, query_kind=query_kind, model=model, with_rows=True)

    # -- for a shard (``scale.shard_store``): what placing batches and hits by global position needs ------
    def committed_rows(self, name: str) -> int:
        """Committed vector rows, live and deleted (no verification): where the next batch starts."""
        with self.repo.db(name) as db:
            return counters(db)[0]

    def check_write(
        self, name: str, ids: Sequence[str], *, kind: str | None = None, model: ModelRef | None = None
    ) -> tuple[int, builtins.list[str]]:
        """The checks before a write, without writing: the gallery verified (GalleryCorruptError), ``kind``
        and ``model`` checked against it (GalleryMismatchError; a gallery made before model identities
        adopts the model's identity). Returns the committed rows and which of ``ids`` it already holds."""
        with self.repo.db(name) as db:
            state = self.checker.open(name, db)
            taken = existing_ids(db, builtins.list(ids))
        self.checker.check_model(name, state.info, kind=kind, model=model)
        return state.n_rows, taken

    def item_rows(self, name: str, ids: Sequence[str]) -> dict[str, int]:
        """The vector row of each live item among ``ids`` (no verification; absent ids are left out)."""
        with self.repo.db(name) as db:
            return item_positions(db, builtins.list(dict.fromkeys(ids)))

    # -- checks -------------------------------------------------------------------------------------------
    def verify_all(self) -> builtins.list[GalleryEntry]:
        """``verify`` every gallery (the server's start-up check); a damaged one is returned as a
        ``CorruptGallery``, never raised, so one bad gallery never stops the others."""
        out: builtins.list[GalleryEntry] = []
        for name in self.repo.names():
            try:
                out.append(self.verify(name))  # a gallery removed meanwhile: GalleryNotFoundError
            except GalleryNotFoundError:
                continue
            except GalleryCorruptError as exc:
                out.append(CorruptGallery(name, exc.reason, self.repo.readable_info(name)))
            except StorageFullError as exc:  # not damage: verified at its next use, once there is room
                log.warning("gallery %s: not verified now: %s", name, exc)
            except (OSError, sqlite3.Error) as exc:
                out.append(CorruptGallery(name, f"cannot be read ({type(exc).__name__}: {exc})"))
        return out

    @out_of_space_reported
    @removal_reported
    def verify(self, name: str) -> GalleryInfo:
        """Check a gallery in full (files, counters, every acknowledged row against its checksum) and record
        the checksums of rows written before checksums existed (trusted on first use, once verified finite).

        Raises:
            GalleryNotFoundError. GalleryCorruptError: the gallery is damaged.
        """
        return self.checker.verify(name)

    @out_of_space_reported
    @removal_reported
    def check(self, name: str) -> CheckReport:
        """Verify a gallery in full without changing it (``lnserve gallery check``); rows without checksums
        are checked for finite values only.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: no check can look past the fault (the database or its
            description is missing or unreadable).
        """
        return self.checker.check(name)

    @out_of_space_reported
    @removal_reported
    def repair(self, name: str, *, dry_run: bool = False) -> RepairReport:
        """Cut a damaged gallery back to its last consistent acknowledged state (``lnserve gallery
        repair``): keep the rows before the first fault, drop the items stored at or after it, recreate a
        missing lock or vector file, recount the counters.

        Raises:
            GalleryNotFoundError. GalleryCorruptError: beyond repair (no readable database or description).
        """
        report = self.checker.repair(name, dry_run=dry_run)
        if report.applied and report.changed:
            self._forget(name)
        return report

    def _forget(self, name: str) -> None:
        with self.repo.gallery_lock(name):
            self.checker.forget(name)
            self.searcher.forget(name)


__all__ = [
    "ITEM_ID_RULE",
    "AddedItems",
    "GalleryStore",
    "ModelRef",
    "check_item_id",
]
