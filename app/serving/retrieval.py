"""The retrieval flow, without HTTP: ``retrieve`` (the one call of ``POST /retrieve``) reads the gallery once,
encodes text and image queries with its model, resolves stored-item queries, and returns the search, which
groups queries by kind and puts results back in request order (run it in a worker thread)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..galleries.errors import GalleryMismatchError
from ..galleries.layout import GalleryInfo, same_model
from ..galleries.rules import check_image_query, describe_pin
from .errors import TooManySentencesError
from .galleries import GalleryModel, ModelChooser, in_thread

if TYPE_CHECKING:
    from ..galleries.protocol import GalleryStoreAPI
    from ..runtime.model_ref import ModelRef


@dataclass(frozen=True)
class Query:
    """One query: a caption, image features, or a stored item (``id``, from ``gallery``: default the
    searched one)."""

    text: str | None = None
    image: Sequence[float] | None = None
    id: str | None = None
    gallery: str | None = None


async def retrieve(
    store: GalleryStoreAPI,
    name: str,
    queries: Sequence[Query],
    k: int,
    choose: ModelChooser,
    *,
    model_named: bool,
    max_queries: int,
    before_encoding: Callable[[GalleryInfo], None],
) -> Callable[[], dict[str, Any]]:
    """Everything of a retrieval up to its search, which it returns to be run in a worker thread: ``{gallery,
    model, score, results}`` with one best-first list per query, in request order.

    The gallery is read once; ``before_encoding`` (the caller's refusals that need it, e.g. an answer over
    its size bound) runs before any encoding, then image queries of a gallery of images are refused. Id-only
    queries need no model unless one is named (``model_named``): the gallery's model need not even be served.
    """
    TooManySentencesError.check(len(queries), max_queries, "queries")
    info: GalleryInfo = await in_thread(store.get, name)
    before_encoding(info)
    if any(q.image is not None for q in queries):  # before encoding them (the store checks it again)
        check_image_query(info)
    needs_model = model_named or any(q.id is None for q in queries)
    model = choose(info) if needs_model else None
    vectors, kinds = await _query_vectors(store, info, model, queries)
    ref = model.model_ref() if model is not None else None
    model_name = model.name if model is not None else info.model

    def search() -> dict[str, Any]:
        found = _search(store, info.name, vectors, kinds, k, ref)
        return {
            "gallery": info.name,
            "model": model_name,
            "score": found["score"],
            "results": found["results"],
        }

    return search


async def _query_vectors(
    store: GalleryStoreAPI, info: GalleryInfo, model: GalleryModel | None, queries: Sequence[Query]
) -> tuple[list[np.ndarray], list[str]]:
    """One vector and one kind (captions | images) per query, in request order."""
    texts = [q.text for q in queries if q.text is not None]
    images = [q.image for q in queries if q.image is not None]
    text_vecs = image_vecs = None
    if texts or images:
        assert model is not None
        text_vecs, image_vecs = await model.encode(texts, images)
    id_queries = [(q.gallery, q.id) for q in queries if q.id is not None]
    stored = await in_thread(_stored_vectors, store, info, id_queries) if id_queries else []
    it_text = iter(text_vecs if text_vecs is not None else [])
    it_image = iter(image_vecs if image_vecs is not None else [])
    it_id = iter(stored)
    vectors, kinds = [], []
    for q in queries:
        if q.text is not None:
            vectors.append(next(it_text))
            kinds.append("captions")
        elif q.image is not None:
            vectors.append(next(it_image))
            kinds.append("images")
        else:
            vec, kind = next(it_id)
            vectors.append(vec)
            kinds.append(kind)
    return vectors, kinds


def _stored_vectors(
    store: GalleryStoreAPI, info: GalleryInfo, items: list[tuple[str | None, str]]
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
                    f"gallery {source!r} (model {sources[source].model!r}, {describe_pin(sources[source])}) "
                    f"and gallery {info.name!r} (model {info.model!r}, {describe_pin(info)}) were embedded "
                    "by different models or precisions"
                )
        item = store.get_item(source, item_id, with_vector=True)
        out.append((item["vector"], sources[source].kind))
    return out


def _search(
    store: GalleryStoreAPI,
    name: str,
    vectors: list[np.ndarray],
    kinds: list[str],
    k: int,
    ref: ModelRef | None,
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
