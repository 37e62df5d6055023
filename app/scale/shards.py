"""The gallery shards: one Ray Serve deployment per shard, each owning a ``ShardStore`` on its node's disk.

Every shard answers reads (``get``, ``list``, ``get_item``, ``search_placed``) for the items it holds; the
encoding replicas fan a query out to all shards and merge the lists (``scale.merge``). Shard 0 is also the
coordinator of writes: per gallery it holds a lock, so writes are serialised as one store's flock does,
and it decides where a batch goes and what its global start is. It keeps no state of its own (everything
is in the shards' stores), so Serve can restart it at any time.

Errors cross the process boundary as values (``("error", exc)``), re-raised by the caller, so an
``LnserveError`` reaches the HTTP error handler exactly as it would in one process. A gallery is quarantined
as a whole: a fault in any shard's part refuses every read and write of it (``raise_first``), and its reason
names the shard's folder (``... (in shard-1-of-2)``), where ``lnserve gallery check / repair`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from lnserve.errors import LnserveError

from ..galleries.errors import (
    DuplicateItemError,
    GalleryCorruptError,
    GalleryNotFoundError,
    ItemNotFoundError,
)
from ..galleries.layout import AddedItems, CorruptGallery, GalleryEntry, GalleryInfo
from ..serving.galleries import warm_scorer
from .errors import ShardUnavailableError
from .shard_store import ShardStore, shard_label, shard_root

log = logging.getLogger("lnserve.scale.shards")

GALLERIES_APP = "lnserve-galleries"
Outcome = tuple[str, Any]  # ("ok", value) or ("error", LnserveError)
# store methods a replica (or the coordinator) may call on a shard: reads, and the placed write
SHARD_METHODS = frozenset(
    {"get", "list", "get_item", "search_placed", "rows", "prepare", "add_placed", "create", "remove",
     "delete_item", "global_positions", "clean_leftovers", "verify_all"}
)  # fmt: skip
COORDINATOR_METHODS = frozenset({"create", "remove", "add", "delete_item"})


def require_every_part(values: Sequence[Any], name: str) -> None:
    """Once shard 0 has a gallery, every shard has its part (creates commit on shard 0 last, removes on it
    first), so a part missing elsewhere is lost storage (a shard restarted where its directory is not):
    503, never a partial answer."""
    for i, v in enumerate(values):
        if isinstance(v, GalleryNotFoundError):
            where = shard_label(i, len(values))
            raise ShardUnavailableError(f"gallery {name!r} has no part on {where} (storage missing); retry")


def shard_name(index: int) -> str:
    return f"shard-{index}"


def raise_first(values: Sequence[Any], *, tolerate: tuple[type[BaseException], ...] = ()) -> None:
    """Raise the error that one store would, of one call's outcomes by shard (errors as values).

    Shard 0 is the authority on whether a gallery exists, so its GalleryNotFoundError comes first; then a
    fault of any shard's part (the gallery is quarantined as a whole, and one store checks its files before
    anything else); then the other errors in shard order, but the ``tolerate``d ones (a gallery not found
    on another shard is a create or remove in progress there: that part counts as empty; an item not found
    on one shard may be on another).
    """
    if isinstance(values[0], GalleryNotFoundError):
        raise values[0]
    corrupt = next((v for v in values if isinstance(v, GalleryCorruptError)), None)
    if corrupt is not None:
        raise corrupt
    for v in values:
        if isinstance(v, BaseException) and not isinstance(v, tolerate):
            raise v


class GalleryShard:
    """Shard ``index`` of ``count``; shard 0 gets handles to the others and coordinates writes."""

    def __init__(self, index: int, count: int, root: str, scorer: str | None, *peers: Any) -> None:
        self.index, self.count = index, count
        self.label = shard_label(index, count)
        self.store = ShardStore(shard_root(root, index, count), scorer=scorer)
        self.peers = list(peers)  # DeploymentHandles of shards 1..count-1 (shard 0 only)
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        for leftover in self.store.clean_leftovers():  # a restarted shard: what its crash left
            log.info("removed %s left in %s by an interrupted create or remove", leftover, self.store.root)
        galleries = self.store.list()
        if any(isinstance(g, GalleryInfo) for g in galleries):  # every metric scans with the kernel
            warm_scorer(self.store.galleries)
        log.info("shard %d/%d at %s: %d galleries", index, count, self.store.root, len(galleries))

    # -- every shard --------------------------------------------------------------------------------
    async def call(self, method: str, *args: Any, **kwargs: Any) -> Outcome:
        """Run one store method in a worker thread (SQLite, fsync and scans never block the loop)."""
        if method not in SHARD_METHODS:
            return "error", LnserveError(f"shard method {method!r} is not allowed")
        try:
            value = await asyncio.to_thread(getattr(self.store, method), *args, **kwargs)
        except GalleryCorruptError as exc:
            return "error", GalleryCorruptError(exc.gallery, self._where(exc.reason))
        except LnserveError as exc:
            return "error", exc
        if method == "create" and value.metric == "order_violation":
            warm_scorer(self.store.galleries)
        if method in ("list", "verify_all"):
            value = [self._located(g) for g in value]
        return "ok", value

    def _where(self, reason: str) -> str:
        return f"{reason} (in {self.label})"

    def _located(self, entry: GalleryEntry) -> GalleryEntry:
        """A quarantined gallery's reason names this shard."""
        if isinstance(entry, CorruptGallery):
            return dataclasses.replace(entry, reason=self._where(entry.reason))
        return entry

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
        found = await self._everywhere("get", name)
        if not isinstance(found[0], GalleryNotFoundError):
            raise_first(found, tolerate=(GalleryNotFoundError,))  # a damaged part: 503, as one store
            info = await self._on(0, "create", name, **kwargs)  # exists: the store's own 409 (or exist_ok)
            return dataclasses.replace(info, count=sum(v.count for v in found if isinstance(v, GalleryInfo)))
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

    async def _add(self, name: str, vectors: Any, **kwargs: Any) -> AddedItems:
        """The whole batch goes to the shard with the fewest rows, at global start = rows committed on all
        shards; ids must be new on every shard. All or none, durable before it returns (one store commit).
        With the gallery's live items at the commit, every shard's counted under the gallery's lock here,
        which every write of it holds (nothing moves them meanwhile); a part lost on any shard is 503 after
        the write, as a read of the gallery is."""
        ids = kwargs.get("ids") or []
        checks = {"kind": kwargs.get("kind"), "model": kwargs.get("model")}  # on every shard's part
        found = await self._everywhere("prepare", name, ids, **checks)
        raise_first(found, tolerate=(GalleryNotFoundError,))
        present = [i for i, v in enumerate(found) if not isinstance(v, BaseException)]
        counts = [v[0] if not isinstance(v, BaseException) else 0 for v in found]
        taken = [i for v in found if not isinstance(v, BaseException) for i in v[1]]
        if taken:
            raise DuplicateItemError(
                f"gallery {name!r} already has item(s) {', '.join(map(repr, taken[:5]))}"
            )
        target = min(present, key=lambda i: (counts[i], i))
        added = await self._on(target, "add_placed", name, vectors, global_start=sum(counts), **kwargs)
        parts = await self._everywhere("get", name)
        raise_first(parts, tolerate=(GalleryNotFoundError,))
        require_every_part(parts, name)
        return AddedItems(added.ids, sum(v.count for v in parts if isinstance(v, GalleryInfo)))

    async def _delete_item(self, name: str, item_id: str) -> None:
        found = await self._everywhere("get", name)  # not found, or a damaged part: first, as one store
        raise_first(found, tolerate=(GalleryNotFoundError,))
        for i in range(self.count):
            try:
                await self._on(i, "delete_item", name, item_id)
                return
            except (ItemNotFoundError, GalleryNotFoundError):
                continue
        raise ItemNotFoundError(f"gallery {name!r} has no item {item_id!r}")
