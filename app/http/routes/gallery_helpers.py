"""What the gallery and retrieval routes share: the served model that embeds a gallery's items or queries
(``served_model``: ``serving.galleries.model_for``, encoding through the model's batcher).

Encoding goes through each model's micro-batcher (``serving.encoding.encode_both``), exactly as ``/encode``
does, so gallery traffic shares batches with encode traffic and never runs a model on the event loop; the
jobs' times go into the request's timing headers (``record_timings``). Store calls (SQLite, fsync, scans)
run in a thread in ``serving.galleries`` (``in_thread``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from fastapi import Request

from ...galleries.layout import GalleryInfo
from ...runtime.model_ref import ModelRef
from ...serving.encoding import encode_both
from ...serving.galleries import ModelChooser, NewItem, model_for
from ...serving.registry import ModelEntry, ModelRegistry
from ...serving.retrieval import Query
from ..deps import cancel_on_disconnect
from ..schemas.retrieval import ImageQuery, ItemIn, RetrieveRequest, TextQuery
from .encode_helpers import record_timings

log = logging.getLogger("lnserve.galleries")


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
        """Captions and image features with the model's defaults (the counts are checked by serving);
        either list may be empty (its result is then None). Cancelled if the client goes away."""
        work = encode_both(self.entry, texts, images, pretokenized=self.pretokenized, truncate=self.truncate)
        done = await cancel_on_disconnect(self.request, work)
        record_timings(self.request, *done.timings)
        return done.texts, done.images


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
