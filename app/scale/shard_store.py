"""One shard's galleries: a ``GalleryStore`` that also knows each item's *global* position.

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
import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..galleries.sqlite_faults import counters, existing_ids
from ..galleries.store import GalleryStore
from ..runtime.model_ref import ModelRef

PLACEMENT = "placement.sqlite"
_SQL_VARS = 500


def shard_label(index: int, count: int) -> str:
    """Shard ``index`` of ``count`` by its folder's name, as fault reasons name it (where to repair)."""
    return f"shard-{index}-of-{count}"


def shard_root(root: Path | str, index: int, count: int) -> Path:
    """Where shard ``index`` of ``count`` keeps its galleries, under the service's gallery root."""
    return Path(root).expanduser() / shard_label(index, count)


class ShardStore(GalleryStore):
    """A gallery store for one shard: batches are placed by the coordinator, hits carry global positions."""

    def rows(self, name: str) -> int:
        """Committed vector rows (live and deleted): the shard's part of the gallery's global row count."""
        with self.repo.db(name) as db:
            return counters(db)[0]

    def prepare(
        self, name: str, ids: Sequence[str], *, kind: str | None = None, model: ModelRef | None = None
    ) -> tuple[int, list[str]]:
        """Committed rows, and which of ``ids`` this shard already holds: the coordinator's checks before a
        write, on every shard. This shard's part is verified (GalleryCorruptError: the whole gallery
        refuses the write, as one store does) and ``kind`` / ``model`` are checked against it
        (GalleryMismatchError; a gallery made before model identities adopts the model's identity)."""
        with self.repo.db(name) as db:
            state = self.checker.open(name, db)
            taken = existing_ids(db, list(ids))
        self.checker.check_model(name, state.info, kind=kind, model=model)
        return state.n_rows, taken

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
    ) -> list[str]:
        """``add_items`` for a batch whose first item has global position ``global_start``.

        Only the coordinator writes, one batch of a gallery at a time, so the local start read here is the
        one ``add_items`` appends at.
        """
        local_start = self.rows(name)
        with self._placement(name) as db:
            db.execute(
                "INSERT OR REPLACE INTO batches (local_start, global_start) VALUES (?, ?)",
                (local_start, int(global_start)),
            )
        return self.add_items(name, vectors, ids=ids, payloads=payloads, kind=kind, model=model)

    def search_placed(
        self, name: str, queries: np.ndarray, k: int, *, query_kind: str, model: ModelRef | None
    ) -> dict[str, Any]:
        """``search``, each hit with ``pos``, its global position (a hit deleted meanwhile is dropped)."""
        queries = np.array(queries, dtype=np.float32)  # writable: Ray hands over read-only buffers
        found = self.search_rows(name, queries, k, query_kind=query_kind, model=model)
        if any(found["results"]):
            runs = self._placement_runs(name)
            for hits in found["results"]:
                for hit in hits:
                    hit["pos"] = _global_position(name, runs, hit.pop("row"))
        return found

    def global_positions(self, name: str, ids: Sequence[str]) -> dict[str, int]:
        """Global position of each live item among ``ids``."""
        local: dict[str, int] = {}
        unique = list(dict.fromkeys(ids))
        with self.repo.db(name) as db:
            for i in range(0, len(unique), _SQL_VARS):
                part = unique[i : i + _SQL_VARS]
                marks = ",".join("?" * len(part))
                local.update(db.execute(f"SELECT id, pos FROM items WHERE id IN ({marks})", part).fetchall())
        if not local:
            return {}
        runs = self._placement_runs(name)
        return {item_id: _global_position(name, runs, pos) for item_id, pos in local.items()}

    def _placement_runs(self, name: str) -> list[tuple[int, int]]:
        """Every batch's ``(local_start, global_start)``, ascending: one read-only query, for searches."""
        path = self.repo.path(name) / PLACEMENT
        if not path.is_file():  # no batch placed yet: the gallery has no rows to map
            return []
        db = sqlite3.connect(path, timeout=60, isolation_level=None)
        try:
            return db.execute("SELECT local_start, global_start FROM batches ORDER BY local_start").fetchall()
        finally:
            db.close()

    @contextlib.contextmanager
    def _placement(self, name: str) -> Iterator[sqlite3.Connection]:
        path = self.repo.path(name) / PLACEMENT
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
