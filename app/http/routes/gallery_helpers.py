"""What the gallery and retrieval routes share: the served model that embeds a gallery's items or queries
(``served_model``: ``serving.galleries.model_for``, encoding through the model's batcher).

Encoding goes through each model's micro-batcher (``ModelEntry.encode_ids`` / ``encode_images``), exactly
as ``/encode`` does, so gallery traffic shares batches with encode traffic and never runs a model on the
event loop. Store calls (SQLite, fsync, scans) are the callers' job to run in a thread.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from fastapi import Request

from ...galleries.layout import GalleryInfo
from ...runtime.model_ref import ModelRef
from ...serving.galleries import ModelChooser, NewItem, model_for
from ...serving.registry import ModelEntry, ModelRegistry
from ...serving.retrieval import Query
from ..deps import cancel_on_disconnect
from ..schemas.retrieval import ImageQuery, ItemIn, RetrieveRequest, TextQuery

log = logging.getLogger("lnserve.galleries")


async def encode_inputs(
    request: Request,
    entry: ModelEntry,
    *,
    texts: list[str],
    images: list[list[float]],
    pretokenized: bool,
    truncate: bool,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Captions and image features through the batcher with the model's defaults (as galleries are built);
    cancelled if the client goes away. Either list may be empty (its result is then None)."""
    seqs = (
        (await entry.prepare_async(texts, pretokenized=pretokenized, eos=None, truncate=truncate))[0]
        if texts
        else []
    )

    async def both() -> tuple[np.ndarray | None, np.ndarray | None]:
        text_job = entry.encode_ids(seqs, normalize=None) if texts else None
        image_job = entry.encode_images(images) if images else None
        jobs = [j for j in (text_job, image_job) if j is not None]
        done = iter(await asyncio.gather(*jobs))
        return (next(done) if text_job else None), (next(done) if image_job else None)

    return await cancel_on_disconnect(request, both())


@dataclass(frozen=True)
class RequestModel:
    """A served model embedding one request's captions and image features (a ``GalleryModel`` of
    ``serving.galleries``): through its batcher, cancelled if the client goes away."""

    entry: ModelEntry
    request: Request
    pretokenized: bool
    truncate: bool

    @property
    def name(self) -> str:
        return self.entry.name

    def model_ref(self) -> ModelRef:
        return self.entry.model_ref()

    async def encode(
        self, texts: list[str], images: list[Any]
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        return await encode_inputs(
            self.request, self.entry, texts=texts, images=images, pretokenized=self.pretokenized,
            truncate=self.truncate,
        )  # fmt: skip


class EncodeOptions(Protocol):
    """What a gallery request says about its model and encoding (``ItemsAdd``, ``RetrieveRequest``)."""

    model: str | None
    pretokenized: bool
    truncate: bool


def served_model(request: Request, registry: ModelRegistry, body: EncodeOptions) -> ModelChooser:
    """The request's model for a gallery: the one it names, which must be the gallery's, else the gallery's
    own (``model_for``)."""

    def choose(info: GalleryInfo) -> RequestModel:
        entry = model_for(registry, info, body.model)
        return RequestModel(entry, request, body.pretokenized, body.truncate)

    return choose


def new_item(item: ItemIn, item_id: str) -> NewItem:
    """The item to add, with ``item_id`` (its own or a new one); a payload given, even null, is kept."""
    given = "payload" in item.model_fields_set
    return NewItem(item_id, text=item.text, image=item.image, payload=item.payload, payload_given=given)


def retrieval_queries(body: RetrieveRequest) -> list[Query]:
    """The request's queries as the retrieval flow takes them, in order."""
    return [
        Query(text=q.text)
        if isinstance(q, TextQuery)
        else Query(image=q.image)
        if isinstance(q, ImageQuery)
        else Query(id=q.id, gallery=q.gallery)
        for q in body.query_list()
    ]
