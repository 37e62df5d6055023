"""``POST /tokenize``: the tokens and ids a model would use for each sentence, unknown words marked. A body
in TEI's shape (``inputs``) is answered as TEI's ``/tokenize`` (``routes.tei``), so TEI clients work here."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from ...serving.registry import INLINE_TOKENIZE_CHARS, ModelEntry
from ..answers import answer_made_off_loop, json_answer, limit_of
from ..body_parsing import OffloadedBodyRoute
from ..deps import RegistryDep
from ..schemas.tei import TEIToken
from ..schemas.tokenize_score import TokenizeRequest, TokenizeResponse
from .tei import tei_tokens

router = APIRouter(tags=["encode"], route_class=OffloadedBodyRoute)


@router.post("/tokenize", response_model=TokenizeResponse | list[list[TEIToken]])
async def tokenize(body: TokenizeRequest, request: Request, registry: RegistryDep) -> Response:
    """Tokenise as ``/encode`` would (same tokenizer, vocabulary, eos and limits), without running the model:
    shows which words the model does not know (they all take one UNK vector). TEI's body (``inputs``,
    ``add_special_tokens``; no ``sentences``) gets TEI's answer, as ``POST /tei/tokenize``."""
    if body.tei is not None:
        return await tei_tokens(registry.get(None), body.tei, request)
    entry = registry.get(body.model)
    if sum(map(len, body.sentences)) <= INLINE_TOKENIZE_CHARS:
        return await json_answer(_answer(entry, body), limit=limit_of(request), inline=True)
    # megabytes of text never stall the loop: tokenised, written within max_answer_bytes and freed in a thread
    return await answer_made_off_loop(lambda: _answer(entry, body), limit=limit_of(request))


def _answer(entry: ModelEntry, body: TokenizeRequest) -> dict[str, Any]:
    """The answer, written by orjson straight from the token lists: it echoes every token, so FastAPI's
    per-object validation and encoding of it would cost in proportion to the input, on the loop."""
    sentences = body.sentences
    return entry.tokenize(sentences, pretokenized=body.pretokenized, eos=body.eos, truncate=body.truncate)
