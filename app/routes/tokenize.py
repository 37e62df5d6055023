"""``POST /tokenize``: the tokens and ids a model would use for each sentence, unknown words marked."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from lnserve.app.body_parsing import OffloadedBodyRoute
from lnserve.app.deps import RegistryDep
from lnserve.app.registry import INLINE_TOKENIZE_CHARS
from lnserve.app.schemas.features import TokenizeRequest, TokenizeResponse

router = APIRouter(tags=["encode"], route_class=OffloadedBodyRoute)


@router.post("/tokenize", response_model=TokenizeResponse)
async def tokenize(body: TokenizeRequest, registry: RegistryDep) -> dict[str, Any]:
    """Tokenise as ``/encode`` would (same tokenizer, vocabulary and eos), without running the model: shows
    which words the model does not know (they all take one UNK vector)."""
    entry = registry.get(body.model)
    args = (body.sentences,)
    kwargs: dict[str, Any] = {"pretokenized": body.pretokenized, "eos": body.eos}
    if sum(map(len, body.sentences)) <= INLINE_TOKENIZE_CHARS:
        return entry.tokenize(*args, **kwargs)
    return await asyncio.to_thread(entry.tokenize, *args, **kwargs)  # megabytes never stall the loop
