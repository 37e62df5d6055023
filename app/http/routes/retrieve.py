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
from starlette.responses import Response

from ...galleries.layout import GalleryInfo
from ...galleries.rules import check_image_query
from ...galleries.store import GalleryStore
from ...serving.errors import TooManySentencesError
from ...serving.galleries import model_for
from ...serving.registry import ModelEntry
from ...serving.retrieval import _search, _stored_vectors
from ..answers import answer_made_off_loop, check_answer_bytes, hits_bytes, limit_of
from ..body_parsing import OffloadedBodyRoute
from ..deps import GalleriesDep, RegistryDep, SettingsDep
from ..schemas.retrieval import (
    IdQuery,
    ImageQuery,
    Query,
    RetrieveRequest,
    RetrieveResponse,
    TextQuery,
)
from .gallery_helpers import encode_inputs

router = APIRouter(tags=["retrieval"], route_class=OffloadedBodyRoute)


@router.post("/retrieve", response_model=RetrieveResponse)
async def retrieve(
    body: RetrieveRequest,
    request: Request,
    registry: RegistryDep,
    store: GalleriesDep,
    settings: SettingsDep,
) -> Response:
    """Best-first ``{id, score, payload}`` per query; ``score`` says which direction is better."""
    queries = body.query_list()
    TooManySentencesError.check(len(queries), settings.max_sentences, "queries")
    info = await run_in_threadpool(store.get, body.gallery)
    # hits without their payloads already over the bound: refused before encoding or searching
    limit = limit_of(request)
    size = hits_bytes(len(queries), body.k, info.count)
    check_answer_bytes(size, limit, f"{len(queries)} queries x {min(body.k, info.count)} hits")
    if any(isinstance(q, ImageQuery) for q in queries):  # before encoding them
        check_image_query(info)
    # id-only requests need no encoder: the gallery's model need not even be served
    needs_model = body.model is not None or not all(isinstance(q, IdQuery) for q in queries)
    entry = model_for(registry, info, body.model) if needs_model else None
    vectors, kinds = await _query_vectors(request, store, info, entry, queries, body)
    ref = entry.model_ref() if entry is not None else None
    model = entry.name if entry is not None else info.model
    one = body.query is not None

    def answer() -> dict[str, Any]:
        found = _search(store, info.name, vectors, kinds, body.k, ref)
        results: list[Any] = found["results"]
        hits = results[0] if one else results
        return {"gallery": info.name, "model": model, "score": found["score"], "results": hits}

    # queries x k hits, each with its payload (any JSON): found, written within max_answer_bytes and freed
    # in a worker thread
    return await answer_made_off_loop(answer, limit=limit)


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
    id_queries = [(q.gallery, q.id) for q in queries if isinstance(q, IdQuery)]
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
