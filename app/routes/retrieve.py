"""``POST /retrieve``: exact top-k of a gallery for text, image-feature or stored-item queries.

Text and image queries are encoded through the model's micro-batcher (as ``/encode``); id queries reuse a
stored vector. Queries are grouped by kind (a caption fills the caption slot of E(caption, image), an image
the image slot), each group is one store search in a worker thread, and the results return in request order.
Every response carries ``score`` (metric, direction, meaning).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from lnserve.app.body_parsing import OffloadedBodyRoute
from lnserve.app.deps import GalleriesDep, RegistryDep, SettingsDep
from lnserve.app.errors import TooManySentencesError
from lnserve.app.galleries.errors import GalleryMismatchError
from lnserve.app.galleries.store import GalleryInfo, GalleryStore, check_image_query, same_model
from lnserve.app.registry import ModelEntry
from lnserve.app.routes.gallery_helpers import encode_inputs, model_for
from lnserve.app.runtime.model_ref import ModelRef
from lnserve.app.schemas.retrieval import (
    IdQuery,
    ImageQuery,
    Query,
    RetrieveRequest,
    RetrieveResponse,
    TextQuery,
)

router = APIRouter(tags=["retrieval"], route_class=OffloadedBodyRoute)


@router.post("/retrieve", response_model=RetrieveResponse)
async def retrieve(
    body: RetrieveRequest,
    request: Request,
    registry: RegistryDep,
    store: GalleriesDep,
    settings: SettingsDep,
) -> JSONResponse:
    """Best-first ``{id, score, payload}`` per query; ``score`` says which direction is better."""
    queries = body.query_list()
    TooManySentencesError.check(len(queries), settings.max_sentences, "queries")
    info = await run_in_threadpool(store.get, body.gallery)
    if any(isinstance(q, ImageQuery) for q in queries):  # before encoding them
        check_image_query(info)
    # id-only requests need no encoder: the gallery's model need not even be served
    needs_model = body.model is not None or not all(isinstance(q, IdQuery) for q in queries)
    entry = model_for(registry, info, body.model) if needs_model else None
    vectors, kinds = await _query_vectors(request, store, info, entry, queries, body)
    ref = entry.model_ref() if entry is not None else None
    found = await run_in_threadpool(_search, store, info.name, vectors, kinds, body.k, ref)
    results: list[Any] = found["results"]
    answer = {
        "gallery": info.name,
        "model": entry.name if entry is not None else info.model,
        "score": found["score"],
        "results": results[0] if body.query is not None else results,
    }
    # written in a thread: queries x k hits, each with its payload (any JSON), can make megabytes
    return await run_in_threadpool(JSONResponse, answer)


async def _query_vectors(
    request: Request,
    store: GalleryStore,
    info: GalleryInfo,
    entry: ModelEntry | None,
    queries: list[Query],
    body: RetrieveRequest,
) -> tuple[list[np.ndarray], list[str]]:
    """One vector and one kind (captions | images) per query, in request order."""
    texts = [q.text for q in queries if isinstance(q, TextQuery)]
    images = [q.image for q in queries if isinstance(q, ImageQuery)]
    text_vecs = image_vecs = None
    if texts or images:
        assert entry is not None
        text_vecs, image_vecs = await encode_inputs(
            request, entry, texts=texts, images=images, pretokenized=body.pretokenized, truncate=body.truncate
        )
    id_queries = [q for q in queries if isinstance(q, IdQuery)]
    stored = await run_in_threadpool(_stored_vectors, store, info, id_queries) if id_queries else []
    it_text = iter(text_vecs if text_vecs is not None else [])
    it_image = iter(image_vecs if image_vecs is not None else [])
    it_id = iter(stored)
    vectors, kinds = [], []
    for q in queries:
        if isinstance(q, TextQuery):
            vectors.append(next(it_text))
            kinds.append("captions")
        elif isinstance(q, ImageQuery):
            vectors.append(next(it_image))
            kinds.append("images")
        else:
            vec, kind = next(it_id)
            vectors.append(vec)
            kinds.append(kind)
    return vectors, kinds


def _stored_vectors(
    store: GalleryStore, info: GalleryInfo, queries: list[IdQuery]
) -> list[tuple[np.ndarray, str]]:
    """Worker thread: each id query's stored vector and its kind; the source must share the model."""
    sources: dict[str, GalleryInfo] = {info.name: info}
    out = []
    for q in queries:
        source = q.gallery or info.name
        if source not in sources:
            sources[source] = store.get(source)
            if not same_model(sources[source], info):
                raise GalleryMismatchError(
                    f"gallery {source!r} (model {sources[source].model!r}) and gallery {info.name!r} "
                    f"(model {info.model!r}) were embedded by different models"
                )
        item = store.get_item(source, q.id, with_vector=True)
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
