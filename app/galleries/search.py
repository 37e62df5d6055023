"""``GallerySearcher``: search of a gallery: a consistent snapshot of its live rows, the exact top-k scored
with the model's own method, ids and payloads. It opens the gallery through the checker and reads through
the repository."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..runtime.model_ref import ModelRef
from ..runtime.retrieval import get_kernel, row_norms, score_info, top_k
from .checks import GalleryChecker
from .errors import GalleryCorruptError, GalleryInputError
from .layout import MAX_K, MAX_QUERIES, GalleryInfo, Snapshot
from .repository import GalleryRepository
from .rules import as_matrix, query_side

Hits = builtins.list[builtins.list[dict[str, Any]]]


class GallerySearcher:
    """Exact brute-force search; caches, per gallery, the live-row mask, the vector map and (cosine) the
    rows' norms between queries."""

    def __init__(self, repo: GalleryRepository, checker: GalleryChecker, scorer: str | None) -> None:
        self.repo = repo
        self.checker = checker
        self.scorer = scorer
        self._snapshots: dict[str, Snapshot] = {}

    def search(
        self,
        name: str,
        queries: np.ndarray,
        k: int,
        *,
        query_kind: str,
        model: ModelRef | None,
        with_rows: bool,
    ) -> dict[str, Any]:
        """``GalleryStore.search``; with ``with_rows`` each hit also carries ``row``, its position in this
        store's vector file (a shard maps it to the gallery-wide position without looking the id up again)."""
        info, snap = self._snapshot(name)
        self.checker.check_model(name, info, model=model)
        side = query_side(info, query_kind)
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= MAX_K:
            raise GalleryInputError(f"k must be an integer in 1..{MAX_K}, got {k!r}")
        q = as_matrix(queries, info.dim, what="query vectors", limit=MAX_QUERIES)
        if snap.vectors is None or q.shape[0] == 0:
            hits: Hits = [[] for _ in range(q.shape[0])]
        else:
            found = top_k(
                q,
                snap.vectors,
                int(k),
                metric=info.metric,
                query_side=side,
                valid=snap.valid,
                kernel=get_kernel(self.scorer) if info.metric == "order_violation" else None,
                item_norms=snap.norms,
            )
            hits = self._resolve(name, found.positions, found.scores, with_rows=with_rows)
        return {"gallery": name, "score": score_info(info.metric), "results": hits}

    def forget(self, name: str) -> None:
        """Drop the gallery's snapshot (removed or repaired)."""
        self._snapshots.pop(name, None)

    def _resolve(
        self,
        name: str,
        positions: builtins.list[np.ndarray],
        scores: builtins.list[np.ndarray],
        *,
        with_rows: bool,
    ) -> Hits:
        """Positions -> {id, score, payload} (and ``row``); an item deleted since the scan is dropped."""
        rows = self.repo.items_at(name, sorted({int(p) for row in positions for p in row}))
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

    def _snapshot(self, name: str) -> tuple[GalleryInfo, Snapshot]:
        """The gallery's identity (opened and checked once per search) with the live-row mask and vector map
        of verified rows, refreshed incrementally when rows were only appended.

        A cosine gallery's snapshot also holds ``row_norms`` of its rows: rows are append-only while the
        state key (uid, repairs, vectors file) stays, so the norms of rows seen before are kept (through
        deletes too) and only new rows are normed, like ``GalleryChecker`` verifies only new rows. A norm is
        a function of its row's bytes alone, so the scores equal a fresh computation bit for bit."""
        with self.repo.gallery_lock(name), self.repo.db(name) as db:
            db.execute("BEGIN")  # one consistent read of counters, checksums and items
            state = self.checker.open(name, db)
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
            pos = self.repo.live_rows(db, since)
            db.execute("COMMIT")
            if pos.size and (pos.min() < 0 or pos.max() >= n_rows):
                raise GalleryCorruptError(name, "an item points past the acknowledged rows")
            valid[pos] = True
            vectors = self.repo.map_vectors(name, n_rows, state.info.dim)
            norms = None
            if state.info.metric == "cosine" and vectors is not None:
                kept = old.norms if old is not None and old.key == key and old.n_rows <= n_rows else None
                done = 0 if kept is None else kept.shape[0]
                norms = np.empty(n_rows, dtype=np.float32)
                if kept is not None:
                    norms[:done] = kept
                norms[done:] = row_norms(vectors[done:])
            snap = Snapshot(key, n_rows, n_deleted, valid, vectors, norms)
            self._snapshots[name] = snap
            return state.info, snap


__all__ = ["GallerySearcher"]
