"""The gallery side of serving, without HTTP: which model serves a gallery, and the scorer's warm-up."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from lnserve.errors import LnserveError

from ..galleries.errors import GalleryMismatchError
from ..galleries.layout import GalleryEntry, GalleryInfo
from .errors import ModelNotFoundError

if TYPE_CHECKING:
    from ..galleries.protocol import GalleryStoreAPI
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
    if not entry.model_ref().matches(info):
        raise GalleryMismatchError(
            f"gallery {info.name!r} was embedded with model {info.model!r}, not with {entry.name!r} "
            "(different weights, vocabulary, cell or options)"
        )
    return entry
