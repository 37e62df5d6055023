"""The retrieval flow, without HTTP: stored-item queries resolved, queries grouped by kind and searched,
results put back in request order (worker-thread functions)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..galleries.errors import GalleryMismatchError
from ..galleries.layout import GalleryInfo, same_model

if TYPE_CHECKING:
    from ..galleries.store import GalleryStore
    from ..runtime.model_ref import ModelRef


def _stored_vectors(
    store: GalleryStore, info: GalleryInfo, items: list[tuple[str | None, str]]
) -> list[tuple[np.ndarray, str]]:
    """Worker thread: each (gallery, item id) query's stored vector and its kind; gallery None is the
    searched one; the source must share the model."""
    sources: dict[str, GalleryInfo] = {info.name: info}
    out = []
    for gallery, item_id in items:
        source = gallery or info.name
        if source not in sources:
            sources[source] = store.get(source)
            if not same_model(sources[source], info):
                raise GalleryMismatchError(
                    f"gallery {source!r} (model {sources[source].model!r}) and gallery {info.name!r} "
                    f"(model {info.model!r}) were embedded by different models"
                )
        item = store.get_item(source, item_id, with_vector=True)
        out.append((item["vector"], sources[source].kind))
    return out


def _search(
    store: GalleryStore, name: str, vectors: list[np.ndarray], kinds: list[str], k: int, ref: ModelRef | None
) -> dict[str, Any]:
    """Worker thread: one store search per query kind, results put back in request order."""
    results: list[Any] = [None] * len(vectors)
    score: dict[str, str] = {}
    for kind in sorted(set(kinds)):
        idx = [i for i, kd in enumerate(kinds) if kd == kind]
        found = store.search(name, np.stack([vectors[i] for i in idx]), k, query_kind=kind, model=ref)
        score = found["score"]
        for i, hits in zip(idx, found["results"], strict=True):
            results[i] = hits
    return {"score": score, "results": results}
