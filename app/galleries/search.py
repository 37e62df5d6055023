# mypy: disable-error-code=misc
# (the methods' ``self`` is the store that inherits this mixin, which mypy calls an erased
# self-type; their bodies are checked against GalleryStore all the same)
"""Search of a gallery (``GalleryStore``'s): a consistent snapshot, the exact top-k, ids and payloads."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.model_ref import ModelRef
from ..runtime.retrieval import get_kernel, score_info, top_k
from .errors import (
    GalleryCorruptError,
    GalleryInputError,
)
from .layout import (
    MAX_K,
    MAX_QUERIES,
    VECTORS,
    GalleryInfo,
    _Snapshot,
)
from .rules import (
    _as_matrix,
    _load_payload,
    _query_side,
)
from .sqlite_faults import (
    _SQL_VARS,
)
from .use_guards import _out_of_space_reported, _removal_reported

if TYPE_CHECKING:
    from .store import GalleryStore


class GallerySearch:
    """GalleryStore's methods of this job (a mixin: ``self`` is the store)."""

    # -- search -------------------------------------------------------------------------------------------
    def search(
        self: GalleryStore,
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
        self: GalleryStore,
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
        self: GalleryStore,
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

    def _snapshot(self: GalleryStore, name: str) -> tuple[GalleryInfo, _Snapshot]:
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

    def _map_vectors(self: GalleryStore, name: str, n_rows: int, dim: int) -> np.ndarray | None:
        if n_rows == 0:
            return None
        try:  # copy-on-write: writable for torch.from_numpy, never written back
            return np.memmap(self.root / name / VECTORS, dtype="<f4", mode="c", shape=(n_rows, dim))
        except FileNotFoundError:
            raise GalleryCorruptError(name, f"{VECTORS} is missing") from None
        except ValueError as exc:  # shorter than the map (truncated since the check)
            raise GalleryCorruptError(name, f"{VECTORS} is truncated ({exc})") from None
