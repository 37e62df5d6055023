"""The gallery side of serving, without HTTP: adding items (``add_items``, the one call of ``POST
/galleries/NAME/items`` and ``lnserve gallery build``), which model serves a gallery, and the scorer's
warm-up."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio.to_thread
import numpy as np

from lnserve.errors import LnserveError

from ..galleries.errors import GalleryMismatchError
from ..galleries.layout import AddedItems, GalleryEntry, GalleryInfo
from ..galleries.rules import check_item_kinds, describe_pin, item_ids
from ..runtime.precisions import describe_identity
from .errors import ModelNotFoundError, TooManySentencesError

if TYPE_CHECKING:
    from ..galleries.protocol import GalleryStoreAPI
    from ..runtime.model_ref import ModelRef
    from .registry import ModelEntry, ModelRegistry

log = logging.getLogger("lnserve.galleries")

_warm_started = threading.Lock()  # held forever once the warm-up has started: it runs once per process


def warm_scorer(store: GalleryStoreAPI) -> None:
    """Build the order-violation kernel in a daemon thread, once an order gallery exists (startup or create).

    Building it JIT-compiles the numba kernel (~5 s cold, under 1 s from numba's cache), too long for
    ``/ready`` to wait, so readiness does not include it; a daemon thread never delays shutdown either. A
    query arriving first waits for the kernel in its worker thread, never on the event loop. Later calls do
    nothing.
    """
    if not _warm_started.acquire(blocking=False):
        return
    threading.Thread(target=_build_scorer, args=(store.scorer,), name="warm-scorer", daemon=True).start()


def _build_scorer(name: str | None) -> None:
    from ..runtime.retrieval import get_kernel

    try:
        log.info("retrieval scorer ready (%s)", get_kernel(name).name)
    except Exception as exc:  # e.g. a bad LNSERVE_SCORER: the first query reports it as an error
        log.warning("retrieval scorer warm-up failed: %s", exc)


def why_unusable(registry: ModelRegistry, entry: GalleryEntry) -> str | None:
    """Why a text query of this gallery would be refused here (quarantined, its model not served or not the
    same, still loading), or None where it would run: the front page offers only galleries it can search
    (one of another server's models, in a shared galleries directory, answered 422 ``gallery_mismatch``)."""
    if not isinstance(entry, GalleryInfo):
        return f"quarantined: {entry.reason}"
    try:
        model_for(registry, entry, None)
    except LnserveError as exc:
        return str(exc)
    return None


def model_for(registry: ModelRegistry, info: GalleryInfo, requested: str | None) -> ModelEntry:
    """The request's model, which must be the gallery's; with none named, the gallery's own (by name).

    Raises:
        ModelNotFoundError: the request names a model this server does not serve.
        GalleryMismatchError: the model differs from the gallery's (by model identity: weights,
            vocabulary, cell, options), or the gallery's model is not served here.
        NotReadyError: the model is still loading.
    """
    if requested is not None:
        entry = registry.get(requested)
    else:
        try:
            entry = registry.get(info.model)
        except ModelNotFoundError:
            raise GalleryMismatchError(
                f"gallery {info.name!r} was embedded with model {info.model!r}, which this server does "
                "not serve"
            ) from None
    ref = entry.model_ref()
    if not ref.matches(info):
        raise GalleryMismatchError(
            f"gallery {info.name!r} was embedded with model {info.model!r} ({describe_pin(info)}), not with "
            f"{entry.name!r} (identity {describe_identity(ref.identity_for(info.kind))}): different weights, "
            "vocabulary, cell, options or precision"
        )
    return entry


class GalleryModel(Protocol):
    """The model that embeds a gallery's items or queries: a served model's batcher (HTTP), or one model
    the CLI opened."""

    @property
    def name(self) -> str: ...

    def model_ref(self) -> ModelRef: ...

    async def encode(
        self, texts: list[str], images: list[Any]
    ) -> tuple[np.ndarray | None, np.ndarray | None]: ...


ModelChooser = Callable[[GalleryInfo], GalleryModel]
"""The model for a gallery (``model_for`` over HTTP); raises when it may not embed into that gallery."""


@dataclass(frozen=True)
class NewItem:
    """One item to add, as a request or an input file gives it: a caption or image features, and its id."""

    id: str
    text: str | None = None
    image: Sequence[float] | None = None
    payload: Any = None
    payload_given: bool = False

    def stored_payload(self) -> Any:
        """The payload given, else a caption's ``{"text": ...}``: the one statement of that default."""
        return self.payload if self.payload_given or self.text is None else {"text": self.text}


async def in_thread(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A store call (SQLite, fsync, scans) in a worker thread: never on the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(call, *args, **kwargs))


async def add_items(
    store: GalleryStoreAPI,
    name: str,
    items: Sequence[NewItem],
    choose: ModelChooser,
    *,
    max_items: int | None = None,
) -> AddedItems:
    """Encode ``items`` with the gallery's model and add them atomically (all or none): their ids and the
    gallery's live items once acknowledged. Each rule once, before any encoding where it can be: the count
    limit, the ids, the kind of every item (the gallery read once), the model (``choose``); then the store
    adds them, opening the gallery once under its writers' lock.

    Raises:
        TooManySentencesError, InvalidItemIdError, GalleryInputError, GalleryNotFoundError,
        GalleryMismatchError, GalleryCorruptError, DuplicateItemError, and the model's encoding errors.
    """
    if max_items is not None:
        TooManySentencesError.check(len(items), max_items)
    ids = item_ids([it.id for it in items], len(items))  # checked here, before encoding: not again
    info: GalleryInfo = await in_thread(store.get, name)
    check_item_kinds(info, items)
    model = choose(info)
    texts = [it.text for it in items if it.text is not None]
    images = [it.image for it in items if it.image is not None]
    text_vecs, image_vecs = await model.encode(texts, images)
    vectors = text_vecs if text_vecs is not None else image_vecs
    payloads = [it.stored_payload() for it in items]
    added: AddedItems = await in_thread(
        store.add, name, vectors, ids=ids, payloads=payloads, model=model.model_ref()
    )
    return added
