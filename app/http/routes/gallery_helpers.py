"""What the gallery and retrieval routes share: which model serves a gallery, and encoding its inputs.

Encoding goes through each model's micro-batcher (``ModelEntry.encode_ids`` / ``encode_images``), exactly
as ``/encode`` does, so gallery traffic shares batches with encode traffic and never runs a model on the
event loop. Store calls (SQLite, fsync, scans) are the callers' job to run in a thread.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np
from fastapi import Request

from ...serving.registry import ModelEntry
from ..deps import cancel_on_disconnect

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
