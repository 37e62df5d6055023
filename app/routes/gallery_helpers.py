"""What the gallery and retrieval routes share: which model serves a gallery, and encoding its inputs.

Encoding goes through each model's micro-batcher (``ModelEntry.encode_ids`` / ``encode_images``), exactly
as ``/encode`` does, so gallery traffic shares batches with encode traffic and never runs a model on the
event loop. Store calls (SQLite, fsync, scans) are the callers' job to run in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
from fastapi import Request

from lnserve.app.deps import cancel_on_disconnect
from lnserve.app.errors import ModelNotFoundError
from lnserve.app.galleries.errors import GalleryMismatchError
from lnserve.app.galleries.store import GalleryInfo, GalleryStore
from lnserve.app.registry import ModelEntry, ModelRegistry

log = logging.getLogger("lnserve.galleries")
_warm_started = threading.Lock()  # held forever once the warm-up has started: it runs once per process


def warm_scorer(store: GalleryStore) -> None:
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
    from lnserve.app.runtime.retrieval import get_kernel

    try:
        log.info("retrieval scorer ready (%s)", get_kernel(name).name)
    except Exception as exc:  # e.g. a bad LNSERVE_SCORER: the first query reports it as an error
        log.warning("retrieval scorer warm-up failed: %s", exc)


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
