"""``GalleryStoreAPI``: what the served app (lifespan, routes, demo gallery) uses from a gallery store.

Two engines implement it: ``GalleryStore`` (one process) and ``lnserve.app.scale.galleries.ShardedGalleries``
(``serve --ray``: a facade over the gallery shards). The app must call nothing on ``app.state.galleries``
that is not declared here, and both implementations must provide all of it with the same signatures,
results and errors; ``tests/unit/app/scale/test_store_protocol.py`` checks both, so a method the app starts
using is added here, and to the Ray facade, in the same change.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .layout import AddedItems, GalleryEntry, GalleryInfo
from .store import ModelRef


@runtime_checkable
class GalleryStoreAPI(Protocol):
    """The gallery store interface of the served app (see ``GalleryStore`` for each method's contract)."""

    @property
    def root(self) -> Path | str:
        """Where the galleries live (for log lines)."""
        ...

    @property
    def scorer(self) -> str | None:
        """The order-violation kernel to warm up (``serving.galleries.warm_scorer``)."""
        ...

    # -- start-up -----------------------------------------------------------------------------------------
    def clean_leftovers(self) -> builtins.list[str]: ...

    def verify_all(self) -> builtins.list[GalleryEntry]: ...

    # -- galleries ----------------------------------------------------------------------------------------
    def list(self) -> builtins.list[GalleryEntry]: ...

    def create(self, name: str, *, kind: str, model: ModelRef, exist_ok: bool = False) -> GalleryInfo: ...

    def get(self, name: str) -> GalleryInfo: ...

    def remove(self, name: str) -> None: ...

    # -- items --------------------------------------------------------------------------------------------
    def add(
        self,
        name: str,
        vectors: np.ndarray,
        *,
        ids: Sequence[str] | None = None,
        payloads: Sequence[Any] | None = None,
        kind: str | None = None,
        model: ModelRef | None = None,
    ) -> AddedItems: ...

    def delete_item(self, name: str, item_id: str) -> None: ...

    def get_item(self, name: str, item_id: str, *, with_vector: bool = False) -> dict[str, Any]: ...

    # -- search -------------------------------------------------------------------------------------------
    def search(
        self,
        name: str,
        queries: np.ndarray,
        k: int = 10,
        *,
        query_kind: str,
        model: ModelRef | None = None,
    ) -> dict[str, Any]: ...


__all__ = ["GalleryStoreAPI"]
