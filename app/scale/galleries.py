"""``ShardedGalleries``: what the routes see as ``app.state.galleries`` in a Ray replica.

It implements ``GalleryStoreAPI`` (``lnserve.app.galleries.protocol``: everything the app's lifespan, routes
and demo gallery use) with the same arguments, results and errors as ``GalleryStore``, so the app runs
unchanged. Reads fan out to every shard in parallel (a query is encoded once, by the replica, and each shard
returns its exact top-k, merged by ``scale.merge``); writes go to the coordinator (shard 0). Methods are
synchronous, like the store's: the app calls them in worker threads.

Start-up and faults behave as one store's, per shard: leftovers of interrupted creates and removes are
cleaned and every gallery is verified on every shard; a gallery whose part on any shard is damaged is
quarantined as a whole (listed as a ``CorruptGallery`` with that shard's reason, 503 ``gallery_corrupt`` on
every use: ``shards.raise_first``).

Errors are the store's own (raised by the shards); the engine adds one, ``ShardUnavailableError``
(``app.scale.errors``): a shard did not answer (restarting, node lost). The whole tree: docs/errors.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..galleries.errors import GalleryNotFoundError, ItemNotFoundError
from ..galleries.layout import MAX_K, AddedItems, CorruptGallery, GalleryEntry, GalleryInfo
from ..runtime.model_ref import ModelRef
from .errors import ShardUnavailableError
from .merge import merge_results
from .shard_store import shard_label
from .shards import GALLERIES_APP, raise_first, require_every_part, shard_name

if TYPE_CHECKING:
    from ..galleries.protocol import GalleryStoreAPI

CALL_TIMEOUT_S = 300.0


def _result(response: Any) -> tuple[str, Any]:
    """A shard's outcome; the engine's own failures (actor died, timeout) become ShardUnavailableError."""
    try:
        return response.result(timeout_s=CALL_TIMEOUT_S)
    except Exception as exc:
        raise ShardUnavailableError(f"a gallery shard is unavailable, retry ({type(exc).__name__})") from None


class ShardedGalleries:
    """The galleries of ``count`` shard deployments, as one store."""

    scorer = "numpy"  # replicas never scan: warming a compiled kernel here would only burn CPU

    def __init__(self, handles: Sequence[Any]) -> None:
        self.handles = list(handles)
        self.root = f"ray:{GALLERIES_APP} ({len(self.handles)} shards)"

    @classmethod
    def connect(cls, count: int) -> ShardedGalleries:
        """Handles to the shards of the running galleries application."""
        from ray import serve

        return cls([serve.get_deployment_handle(shard_name(i), app_name=GALLERIES_APP) for i in range(count)])

    # -- plumbing -----------------------------------------------------------------------------------
    @staticmethod
    def _value(outcome: tuple[str, Any]) -> Any:
        status, value = outcome
        if status == "error":
            raise value
        return value

    def _everywhere(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """The method on every shard at once; values, or the LnserveErrors as values, by shard."""
        responses = [h.call.remote(method, *args, **kwargs) for h in self.handles]
        outcomes = [_result(r) for r in responses]
        return [value for _, value in outcomes]

    def _coordinate(self, method: str, name: str, *args: Any, **kwargs: Any) -> Any:
        response = self.handles[0].coordinate.remote(method, name, *args, **kwargs)
        return self._value(_result(response))

    @staticmethod
    def _merge_entries(per_shard: list[list[GalleryEntry]]) -> list[GalleryEntry]:
        """One entry per gallery of shard 0 (the authority on which exist; a part left on another shard
        by a create that never committed is not a gallery): the live items of every shard, and quarantined
        when any shard's part is, with every damaged part's reason."""
        by_shard = [{g.name: g for g in entries} for entries in per_shard]
        out: list[GalleryEntry] = []
        for first in per_shard[0]:
            parts = [entries[first.name] for entries in by_shard if first.name in entries]
            infos = [p if isinstance(p, GalleryInfo) else p.info for p in parts]
            count = sum(i.count for i in infos if i is not None)
            bad = [p for p in parts if isinstance(p, CorruptGallery)]
            if isinstance(first, GalleryInfo) and not bad:
                out.append(dataclasses.replace(first, count=count))
                continue
            info = infos[0]
            out.append(
                CorruptGallery(
                    first.name,
                    "; ".join(p.reason for p in bad),
                    None if info is None else dataclasses.replace(info, count=count),
                )
            )
        return out

    # -- start-up -----------------------------------------------------------------------------------
    def clean_leftovers(self) -> list[str]:
        """Every shard's leftovers of interrupted creates and removes, deleted; named ``SHARD/NAME``."""
        values = self._everywhere("clean_leftovers")
        raise_first(values)
        n = len(self.handles)
        return [f"{shard_label(i, n)}/{name}" for i, names in enumerate(values) for name in names]

    def verify_all(self) -> list[GalleryEntry]:
        """``verify_all`` on every shard (in parallel), merged: a gallery damaged on any shard is listed as
        a ``CorruptGallery`` (and every shard that found it refuses it from now on)."""
        values = self._everywhere("verify_all")
        raise_first(values)
        return self._merge_entries(values)

    # -- galleries ----------------------------------------------------------------------------------
    def create(self, name: str, *, kind: str, model: ModelRef, exist_ok: bool = False) -> GalleryInfo:
        return self._coordinate("create", name, kind=kind, model=model, exist_ok=exist_ok)

    def get(self, name: str) -> GalleryInfo:
        """Shard 0's identity of the gallery, with the live items of every shard."""
        values = self._everywhere("get", name)
        raise_first(values, tolerate=(GalleryNotFoundError,))
        require_every_part(values, name)
        count = sum(v.count for v in values if isinstance(v, GalleryInfo))
        return dataclasses.replace(values[0], count=count)

    def list(self) -> list[GalleryEntry]:
        """Shard 0's galleries, with the live items of every shard; quarantined ones as ``CorruptGallery``."""
        values = self._everywhere("list")
        raise_first(values)
        return self._merge_entries(values)

    def remove(self, name: str) -> None:
        self._coordinate("remove", name)

    # -- items --------------------------------------------------------------------------------------
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
        """All or none on one shard, durable before it returns, with the gallery's live items at its commit
        (as ``GalleryStore.add``): the coordinator sums the shards' counts under the gallery's write lock."""
        return self._coordinate(
            "add", name, np.asarray(vectors), ids=None if ids is None else list(ids),
            payloads=None if payloads is None else list(payloads), kind=kind, model=model,
        )  # fmt: skip

    def delete_item(self, name: str, item_id: str) -> None:
        self._coordinate("delete_item", name, item_id)

    def get_item(self, name: str, item_id: str, *, with_vector: bool = False) -> dict[str, Any]:
        values = self._everywhere("get_item", name, item_id, with_vector=with_vector)
        raise_first(values, tolerate=(ItemNotFoundError, GalleryNotFoundError))
        for v in values:
            if isinstance(v, dict):
                return v
        raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")

    # -- search -------------------------------------------------------------------------------------
    def search(
        self, name: str, queries: np.ndarray, k: int = 10, *, query_kind: str, model: ModelRef | None = None
    ) -> dict[str, Any]:
        """Each shard's exact top-k, merged into the single-store result (same ids, scores, tie order)."""
        values = self._everywhere(
            "search_placed", name, np.asarray(queries), k, query_kind=query_kind, model=model
        )
        raise_first(values, tolerate=(GalleryNotFoundError,))
        require_every_part(values, name)
        k = min(int(k), MAX_K)
        direction = values[0]["score"]["direction"]
        parts = [v["results"] for v in values if not isinstance(v, BaseException)]
        results = merge_results(parts, k, direction)
        return {"gallery": name, "score": values[0]["score"], "results": results}


if TYPE_CHECKING:  # a type checker proves the facade implements the app's store interface
    _CONFORMS: type[GalleryStoreAPI] = ShardedGalleries
