"""One shard's galleries: a ``GalleryStore``, held, and each item's *global* position.

A sharded gallery is the same ``GalleryStore`` layout on every shard (``ROOT/shard-I-of-S/NAME/``), each
holding whole write batches. The coordinator serialises a gallery's writes and gives each batch its global
start: the number of rows all shards had committed before it, i.e. the position its first item would have
had in one single store. The shard records ``(local_start, global_start)`` in ``placement.sqlite`` beside
the gallery *before* the store commits the batch; a crash in between leaves a row that points at
uncommitted rows only, and the next batch on that shard (same local start) replaces it. Search hits carry
their global position so that ``scale.merge`` can break ties exactly as one store does.

No Ray here: the deployment (``scale.shards``) runs these methods in worker threads.
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..galleries.layout import AddedItems, GalleryEntry, GalleryInfo
from ..galleries.rules import check_gallery_name
from ..galleries.store import GalleryStore
from ..runtime.model_ref import ModelRef

PLACEMENT = "placement.sqlite"


def shard_label(index: int, count: int) -> str:
    """Shard ``index`` of ``count`` by its folder's name, as fault reasons name it (where to repair)."""
    return f"shard-{index}-of-{count}"


def shard_root(root: Path | str, index: int, count: int) -> Path:
    """Where shard ``index`` of ``count`` keeps its galleries, under the service's gallery root."""
    return Path(root).expanduser() / shard_label(index, count)


class ShardStore:
    """A gallery store for one shard: batches are placed by the coordinator, hits carry global positions.

    It holds a ``GalleryStore`` (composition: only its public methods are used) and answers the store methods
    a shard serves (``scale.shards.SHARD_METHODS``) with the store's own results and errors, plus the placed
    write and search."""

    def __init__(self, root: Path | str, *, scorer: str | None = None) -> None:
        self.galleries = GalleryStore(root, scorer=scorer)

    @property
    def root(self) -> Path:
        return self.galleries.root

    @property
    def scorer(self) -> str | None:
        """The order-violation kernel to warm up (``serving.galleries.warm_scorer``)."""
        return self.galleries.scorer

    # -- the store's own methods, as one store answers them ----------------------------------------------
    def clean_leftovers(self) -> builtins.list[str]:
        return self.galleries.clean_leftovers()

    def verify_all(self) -> builtins.list[GalleryEntry]:
        return self.galleries.verify_all()

    def create(self, name: str, *, kind: str, model: ModelRef, exist_ok: bool = False) -> GalleryInfo:
        return self.galleries.create(name, kind=kind, model=model, exist_ok=exist_ok)

    def get(self, name: str) -> GalleryInfo:
        return self.galleries.get(name)

    def list(self) -> builtins.list[GalleryEntry]:
        return self.galleries.list()

    def remove(self, name: str) -> None:
        self.galleries.remove(name)

    def delete_item(self, name: str, item_id: str) -> None:
        self.galleries.delete_item(name, item_id)

    def get_item(self, name: str, item_id: str, *, with_vector: bool = False) -> dict[str, Any]:
        return self.galleries.get_item(name, item_id, with_vector=with_vector)

    def search(
        self, name: str, queries: np.ndarray, k: int = 10, *, query_kind: str, model: ModelRef | None = None
    ) -> dict[str, Any]:
        return self.galleries.search(name, queries, k, query_kind=query_kind, model=model)

    # -- placement ------------------------------------------------------------------------------------------
    def rows(self, name: str) -> int:
        """Committed vector rows (live and deleted): the shard's part of the gallery's global row count."""
        return self.galleries.committed_rows(name)

    def prepare(
        self, name: str, ids: Sequence[str], *, kind: str | None = None, model: ModelRef | None = None
    ) -> tuple[int, builtins.list[str]]:
        """Committed rows, and which of ``ids`` this shard already holds: the coordinator's checks before a
        write, on every shard. This shard's part is verified (GalleryCorruptError: the whole gallery
        refuses the write, as one store does) and ``kind`` / ``model`` are checked against it
        (GalleryMismatchError; a gallery made before model identities adopts the model's identity)."""
        return self.galleries.check_write(name, ids, kind=kind, model=model)

    def add_placed(
        self,
        name: str,
        vectors: np.ndarray,
        *,
        ids: Sequence[str],
        payloads: Sequence[Any] | None,
        model: ModelRef | None,
        global_start: int,
        kind: str | None = None,
    ) -> AddedItems:
        """``add`` for a batch whose first item has global position ``global_start``: the ids, and this
        shard's live items at the commit.

        Only the coordinator writes, one batch of a gallery at a time, so the local start read here is the
        one ``add`` appends at.
        """
        local_start = self.rows(name)
        with self._placement(name) as db:
            db.execute(
                "INSERT OR REPLACE INTO batches (local_start, global_start) VALUES (?, ?)",
                (local_start, int(global_start)),
            )
        return self.galleries.add(name, vectors, ids=ids, payloads=payloads, kind=kind, model=model)

    def search_placed(
        self, name: str, queries: np.ndarray, k: int, *, query_kind: str, model: ModelRef | None
    ) -> dict[str, Any]:
        """``search``, each hit with ``pos``, its global position (a hit deleted meanwhile is dropped)."""
        queries = np.array(queries, dtype=np.float32)  # writable: Ray hands over read-only buffers
        found = self.galleries.search_rows(name, queries, k, query_kind=query_kind, model=model)
        if any(found["results"]):
            runs = self._placement_runs(name)
            for hits in found["results"]:
                for hit in hits:
                    hit["pos"] = _global_position(name, runs, hit.pop("row"))
        return found

    def global_positions(self, name: str, ids: Sequence[str]) -> dict[str, int]:
        """Global position of each live item among ``ids``."""
        local = self.galleries.item_rows(name, ids)
        if not local:
            return {}
        runs = self._placement_runs(name)
        return {item_id: _global_position(name, runs, pos) for item_id, pos in local.items()}

    def _placement_path(self, name: str) -> Path:
        """The placement file beside the gallery's own files (``ROOT/NAME/``)."""
        return self.root / check_gallery_name(name) / PLACEMENT

    def _placement_runs(self, name: str) -> builtins.list[tuple[int, int]]:
        """Every batch's ``(local_start, global_start)``, ascending: one read-only query, for searches."""
        path = self._placement_path(name)
        if not path.is_file():  # no batch placed yet: the gallery has no rows to map
            return []
        db = sqlite3.connect(path, timeout=60, isolation_level=None)
        try:
            return db.execute("SELECT local_start, global_start FROM batches ORDER BY local_start").fetchall()
        finally:
            db.close()

    @contextlib.contextmanager
    def _placement(self, name: str) -> Iterator[sqlite3.Connection]:
        path = self._placement_path(name)
        self.get(name)  # GalleryNotFoundError before a placement file is created for nothing
        db = sqlite3.connect(path, timeout=60, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS batches "
                "(local_start INTEGER PRIMARY KEY, global_start INTEGER NOT NULL)"
            )
            yield db
        finally:
            db.close()


def _global_position(name: str, runs: list[tuple[int, int]], row: int) -> int:
    """The gallery-wide position of this shard's ``row``: its batch's global start plus the offset in it."""
    i = bisect.bisect_right(runs, (row, float("inf"))) - 1
    if i < 0:
        raise RuntimeError(f"gallery {name!r}: row {row} has no placement record")
    return runs[i][1] + (row - runs[i][0])
