"""The gallery shards: one Ray Serve deployment per shard, each owning a ``ShardStore`` on its node's disk.

Every shard answers reads (``get``, ``list``, ``get_item``, ``search_placed``) for the items it holds; the
encoding replicas fan a query out to all shards and merge the lists (``scale.merge``). Shard 0 is also the
coordinator of writes: per gallery it holds a lock, so writes are serialised as one store's flock does,
and it decides where a batch goes and what its global start is. It keeps no state of its own (everything
is in the shards' stores), so Serve can restart it at any time.

Errors cross the process boundary as values (``("error", exc)``), re-raised by the caller, so an
``LnserveError`` reaches the HTTP error handler exactly as it would in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from typing import Any

from lnserve.app.galleries.errors import (
    DuplicateItemError,
    GalleryNotFoundError,
    ItemNotFoundError,
)
from lnserve.app.routes.gallery_helpers import warm_scorer
from lnserve.app.scale.shard_store import ShardStore, shard_root
from lnserve.converters.errors import LnserveError

log = logging.getLogger("lnserve.scale.shards")

GALLERIES_APP = "lnserve-galleries"
Outcome = tuple[str, Any]  # ("ok", value) or ("error", LnserveError)
# store methods a replica (or the coordinator) may call on a shard: reads, and the placed write
SHARD_METHODS = frozenset(
    {"get", "list", "get_item", "search_placed", "rows", "prepare", "add_placed", "create", "remove",
     "delete_item", "global_positions"}
)  # fmt: skip
COORDINATOR_METHODS = frozenset({"create", "remove", "add_items", "delete_item"})


def shard_name(index: int) -> str:
    return f"shard-{index}"


class GalleryShard:
    """Shard ``index`` of ``count``; shard 0 gets handles to the others and coordinates writes."""

    def __init__(self, index: int, count: int, root: str, scorer: str | None, *peers: Any) -> None:
        self.index, self.count = index, count
        self.store = ShardStore(shard_root(root, index, count), scorer=scorer)
        self.peers = list(peers)  # DeploymentHandles of shards 1..count-1 (shard 0 only)
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        galleries = self.store.list()
        if any(g.metric == "order_violation" for g in galleries):
            warm_scorer(self.store)
        log.info("shard %d/%d at %s: %d galleries", index, count, self.store.root, len(galleries))

    # -- every shard --------------------------------------------------------------------------------
    async def call(self, method: str, *args: Any, **kwargs: Any) -> Outcome:
        """Run one store method in a worker thread (SQLite, fsync and scans never block the loop)."""
        if method not in SHARD_METHODS:
            return "error", LnserveError(f"shard method {method!r} is not allowed")
        try:
            value = await asyncio.to_thread(getattr(self.store, method), *args, **kwargs)
        except LnserveError as exc:
            return "error", exc
        if method == "create" and value.metric == "order_violation":
            warm_scorer(self.store)
        return "ok", value

    async def describe(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count, "root": str(self.store.root)}

    # -- shard 0: the write coordinator -------------------------------------------------------------
    async def coordinate(self, method: str, name: str, *args: Any, **kwargs: Any) -> Outcome:
        """One gallery write, serialised per gallery; returns what the single store would."""
        if self.index != 0 or method not in COORDINATOR_METHODS:
            return "error", LnserveError(f"shard {self.index} does not coordinate {method!r}")
        try:
            async with self._locks[name]:
                return "ok", await getattr(self, f"_{method}")(name, *args, **kwargs)
        except LnserveError as exc:
            return "error", exc

    async def _on(self, index: int, method: str, *args: Any, **kwargs: Any) -> Any:
        outcome = (
            await self.call(method, *args, **kwargs)
            if index == 0
            else await self.peers[index - 1].call.remote(method, *args, **kwargs)
        )
        status, value = outcome
        if status == "error":
            raise value
        return value

    async def _everywhere(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """The method on every shard, in parallel; values (or the errors, not raised) by shard."""
        return list(
            await asyncio.gather(
                *(self._on(i, method, *args, **kwargs) for i in range(self.count)), return_exceptions=True
            )
        )

    async def _create(self, name: str, **kwargs: Any) -> Any:
        """Shard 0 is the commit point: the gallery exists once shard 0 has it. The others are created
        first, replacing any leftover of a create or remove that died half-way."""
        try:
            await self._on(0, "get", name)
        except GalleryNotFoundError:
            pass
        else:
            return await self._on(0, "create", name, **kwargs)  # exists: the store's own 409 (or exist_ok)
        for i in range(1, self.count):
            with contextlib.suppress(GalleryNotFoundError):
                await self._on(i, "remove", name)
            await self._on(i, "create", name, **kwargs)
        return await self._on(0, "create", name, **kwargs)

    async def _remove(self, name: str) -> None:
        await self._on(0, "remove", name)  # the commit point (raises GalleryNotFoundError)
        for i in range(1, self.count):
            with contextlib.suppress(GalleryNotFoundError):
                await self._on(i, "remove", name)

    async def _add_items(self, name: str, vectors: Any, **kwargs: Any) -> list[str]:
        """The whole batch goes to the shard with the fewest rows, at global start = rows committed on all
        shards; ids must be new on every shard. All or none, durable before it returns (one store commit)."""
        ids = kwargs.get("ids") or []
        found = await self._everywhere("prepare", name, ids)
        for value in found:
            if isinstance(value, BaseException) and not isinstance(value, GalleryNotFoundError):
                raise value
        if isinstance(found[0], BaseException):
            raise found[0]
        counts = [v[0] if not isinstance(v, BaseException) else 0 for v in found]
        taken = [i for v in found if not isinstance(v, BaseException) for i in v[1]]
        if taken:
            raise DuplicateItemError(
                f"gallery {name!r} already has item(s) {', '.join(map(repr, taken[:5]))}"
            )
        target = min(range(self.count), key=lambda i: (counts[i], i))
        return await self._on(target, "add_placed", name, vectors, global_start=sum(counts), **kwargs)  # type: ignore[no-any-return]

    async def _delete_item(self, name: str, item_id: str) -> None:
        await self._on(0, "get", name)  # GalleryNotFoundError first, as the store does
        for i in range(self.count):
            try:
                await self._on(i, "delete_item", name, item_id)
                return
            except (ItemNotFoundError, GalleryNotFoundError):
                continue
        raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
