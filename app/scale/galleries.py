"""``ShardedGalleries``: what the routes see as ``app.state.galleries`` in a Ray replica.

It has the ``GalleryStore`` methods the routes and the demo gallery use, with the same arguments, results
and errors, so the routes run unchanged. Reads fan out to every shard in parallel (a query is encoded once,
by the replica, and each shard returns its exact top-k, merged by ``scale.merge``); writes go to the
coordinator (shard 0). Methods are synchronous, like the store's: the routes call them in worker threads.

Errors are the store's own (raised by the shards); the engine adds one (see ``app.errors`` for the tree):

└── ShardUnavailableError  (shard_unavailable)  a shard did not answer (restarting, node lost)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from lnserve.app.galleries.errors import GalleryNotFoundError, ItemNotFoundError
from lnserve.app.galleries.store import MAX_K, GalleryInfo
from lnserve.app.runtime.model_ref import ModelRef
from lnserve.app.scale.merge import merge_results
from lnserve.app.scale.shards import GALLERIES_APP, shard_name
from lnserve.converters.errors import LnserveError

CALL_TIMEOUT_S = 300.0


class ShardUnavailableError(LnserveError):
    """A gallery shard did not answer (restarting, its node lost): retry after ``Retry-After``."""

    code = "shard_unavailable"


def _result(response: Any) -> tuple[str, Any]:
    """A shard's outcome; the engine's own failures (actor died, timeout) become ShardUnavailableError."""
    try:
        return response.result(timeout_s=CALL_TIMEOUT_S)  # type: ignore[no-any-return]
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
    def _first_error(values: list[Any]) -> None:
        """Shard 0's error first: it is the authority on whether a gallery exists."""
        for v in values:
            if isinstance(v, BaseException):
                raise v

    # -- galleries ----------------------------------------------------------------------------------
    def create(self, name: str, *, kind: str, model: ModelRef, exist_ok: bool = False) -> GalleryInfo:
        return self._coordinate("create", name, kind=kind, model=model, exist_ok=exist_ok)  # type: ignore[no-any-return]

    def get(self, name: str) -> GalleryInfo:
        """Shard 0's identity of the gallery, with the live items of every shard."""
        values = self._everywhere("get", name)
        self._first_error(values[:1])
        count = sum(v.count for v in values if isinstance(v, GalleryInfo))
        return dataclasses.replace(values[0], count=count)

    def list(self) -> list[GalleryInfo]:
        values = self._everywhere("list")
        self._first_error(values)
        counts: dict[str, int] = {}
        for infos in values:
            for g in infos:
                counts[g.name] = counts.get(g.name, 0) + g.count
        return [dataclasses.replace(g, count=counts[g.name]) for g in values[0]]

    def remove(self, name: str) -> None:
        self._coordinate("remove", name)

    # -- items --------------------------------------------------------------------------------------
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
        """All or none on one shard, durable before it returns (as ``GalleryStore.add_items``)."""
        return self._coordinate(  # type: ignore[no-any-return]
            "add_items", name, np.asarray(vectors), ids=None if ids is None else list(ids),
            payloads=None if payloads is None else list(payloads), kind=kind, model=model,
        )  # fmt: skip

    def delete_item(self, name: str, item_id: str) -> None:
        self._coordinate("delete_item", name, item_id)

    def get_item(self, name: str, item_id: str, *, with_vector: bool = False) -> dict[str, Any]:
        values = self._everywhere("get_item", name, item_id, with_vector=with_vector)
        if isinstance(values[0], GalleryNotFoundError):
            raise values[0]
        for v in values:
            if isinstance(v, dict):
                return v
        for v in values:
            if isinstance(v, BaseException) and not isinstance(v, ItemNotFoundError | GalleryNotFoundError):
                raise v
        raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")

    # -- search -------------------------------------------------------------------------------------
    def search(
        self, name: str, queries: np.ndarray, k: int = 10, *, query_kind: str, model: ModelRef | None = None
    ) -> dict[str, Any]:
        """Each shard's exact top-k, merged into the single-store result (same ids, scores, tie order)."""
        values = self._everywhere(
            "search_placed", name, np.asarray(queries), k, query_kind=query_kind, model=model
        )
        self._first_error(values)
        k = min(int(k), MAX_K)
        direction = values[0]["score"]["direction"]
        results = merge_results([v["results"] for v in values], k, direction)
        return {"gallery": name, "score": values[0]["score"], "results": results}
