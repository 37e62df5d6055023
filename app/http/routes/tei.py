"""The text-embeddings-inference (TEI) protocol, so huggingface_hub's ``InferenceClient`` and TEI load tests
work: ``POST /embed``, ``POST /similarity``, ``POST /`` (either, by the shape of ``inputs``), ``POST
/embed_all``, ``POST /decode`` and TEI's tokenize at ``POST /tei/tokenize`` (and at ``POST /tokenize``,
which tells TEI's body from lnserve's by its ``inputs`` field).

TEI serves one model per process: these routes answer with the default model (``LNSERVE_DEFAULT_MODEL``).
They run on the same tokeniser, limits, micro-batcher, API key and metrics as ``/encode``. Errors keep
lnserve's JSON body and code, with TEI's statuses: over a limit (``too_many_sentences``,
``sentence_too_long``, a body over ``max_body_bytes``) is 413, other bad input 422, overload 429, not ready
503.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from ...runtime.errors import EncodeInputError
from ...serving.encoding import encode_texts, encode_token_states
from ...serving.errors import SentenceTooLongError, TooManySentencesError
from ...serving.registry import INLINE_TOKENIZE_CHARS, ModelEntry, ModelRegistry
from ..answers import answer_made_off_loop, json_answer, limit_of
from ..body_parsing import OffloadedBodyRoute
from ..deps import RegistryDep, cancel_on_disconnect, registry_of
from ..errors import error_response
from ..schemas import VectorJSONResponse
from ..schemas.tei import (
    SimilarityInput,
    TEIDecodeRequest,
    TEIEmbedAllRequest,
    TEIEmbedRequest,
    TEIRootRequest,
    TEISimilarityRequest,
    TEIToken,
    TEITokenizeRequest,
)
from .encode_helpers import AnswerBound, record_timings, text_inputs

# TEI answers 413 (its "validation" errors) where a request is over a limit; lnserve's table says 422
_OVER_LIMIT = (TooManySentencesError, SentenceTooLongError)


class TEIRoute(OffloadedBodyRoute):
    """A route that answers over-limit errors with TEI's 413 (same code and body as everywhere else)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def tei_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except _OVER_LIMIT as exc:
                return _too_large(request, exc)

        return tei_handler

    def own_error(self, request: Request, exc: Exception) -> Response | None:
        return _too_large(request, exc) if isinstance(exc, _OVER_LIMIT) else None


def _too_large(request: Request, exc: TooManySentencesError | SentenceTooLongError) -> Response:
    rid = getattr(request.state, "request_id", None)
    return error_response(413, exc.code, str(exc), request_id=rid)


router = APIRouter(tags=["tei"], route_class=TEIRoute)


def _no_prompt(prompt_name: str | None) -> None:
    if prompt_name is not None:
        raise EncodeInputError(f"prompt_name={prompt_name!r}: lnserve's models have no prompts")


async def _embed(
    request: Request,
    registry: ModelRegistry,
    body: TEIEmbedRequest | TEIRootRequest,
    inputs: str | list[str] | list[int] | list[list[int]],
) -> Response:
    texts = text_inputs(inputs)
    _no_prompt(body.prompt_name)
    bound = AnswerBound(request)
    work = encode_texts(
        registry, None, texts, truncate=bool(body.truncate), keep_end=body.truncation_direction == "left",
        normalize=body.normalize, dimensions=body.dimensions, admit=bound.admit,
    )  # fmt: skip
    done = await cancel_on_disconnect(request, work)
    return await bound.send(np.ascontiguousarray(done.vectors, dtype=np.float32), done.timing)


async def _similarity(
    request: Request,
    registry: ModelRegistry,
    body: TEISimilarityRequest | TEIRootRequest,
    inputs: SimilarityInput,
) -> Response:
    """Cosine similarity of ``source_sentence`` to each of ``sentences`` (as TEI: unit vectors' dot)."""
    _no_prompt(body.prompt_name)
    texts = [inputs.source_sentence, *inputs.sentences]
    work = encode_texts(
        registry, None, texts, truncate=bool(body.truncate), keep_end=body.truncation_direction == "left",
        normalize=True,
    )  # fmt: skip
    done = await cancel_on_disconnect(request, work)
    record_timings(request, done.timing)
    scores = (done.vectors[1:] @ done.vectors[0]).astype(np.float32)  # one number per sentence: small
    return await json_answer(scores, limit=limit_of(request), inline=True)


@router.post("/embed", response_model=list[list[float]], response_class=VectorJSONResponse)
async def embed(body: TEIEmbedRequest, request: Request) -> Response:
    """TEI ``/embed``: one vector per input, always a list of lists."""
    return await _embed(request, registry_of(request), body, body.inputs)


@router.post("/similarity", response_model=list[float], response_class=VectorJSONResponse)
async def similarity(body: TEISimilarityRequest, request: Request, registry: RegistryDep) -> Response:
    """TEI ``/similarity``: the cosine similarity of ``source_sentence`` to each sentence, in order."""
    return await _similarity(request, registry, body, body.inputs)


@router.post("/", response_model=list[list[float]] | list[float], response_class=VectorJSONResponse)
async def root(body: TEIRootRequest, request: Request, registry: RegistryDep) -> Response:
    """The Hugging Face inference shape (``InferenceClient(base_url=...)``): ``feature_extraction`` sends
    ``{"inputs": "..." | [...]}`` (vectors), ``sentence_similarity`` sends ``{"inputs": {"source_sentence":
    ..., "sentences": [...]}}`` (one score per sentence)."""
    if isinstance(body.inputs, SimilarityInput):
        return await _similarity(request, registry, body, body.inputs)
    return await _embed(request, registry, body, body.inputs)


@router.post("/tei/tokenize", response_model=list[list[TEIToken]])
async def tei_tokenize(body: TEITokenizeRequest, request: Request, registry: RegistryDep) -> Response:
    """TEI's ``/tokenize`` shape (also accepted at ``POST /tokenize``, told apart by ``inputs``): per input,
    each token with its id; ``special`` marks the appended ``<eos>``; character offsets are not tracked
    (null)."""
    return await tei_tokens(registry.get(None), body, request)


async def tei_tokens(entry: ModelEntry, body: TEITokenizeRequest, request: Request) -> Response:
    """TEI's tokenize answer for ``body`` with ``entry``'s tokenizer and limits."""
    _no_prompt(body.prompt_name)
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    if not texts:
        raise EncodeInputError("inputs is an empty list")
    eos = None if body.add_special_tokens else False
    # written by orjson, within max_answer_bytes (it echoes every token); made and freed off the loop for
    # large inputs
    if sum(map(len, texts)) <= INLINE_TOKENIZE_CHARS:
        return await json_answer(_tei_tokens(entry, texts, eos), limit=limit_of(request), inline=True)
    return await answer_made_off_loop(lambda: _tei_tokens(entry, texts, eos), limit=limit_of(request))


def _tei_tokens(entry: ModelEntry, texts: list[str], eos: bool | None) -> list[list[dict[str, Any]]]:
    out = entry.tokenize(texts, pretokenized=False, eos=eos)
    return [
        [
            {
                "id": t["id"],
                "text": t["token"],
                "special": out["eos"] and i == len(s["tokens"]) - 1,
                "start": None,  # TEIToken's fields, written here without FastAPI's per-token validation
                "stop": None,
            }
            for i, t in enumerate(s["tokens"])
        ]
        for s in out["sentences"]
    ]


@router.post("/decode", response_model=list[str])
async def decode(body: TEIDecodeRequest, request: Request, registry: RegistryDep) -> Response:
    """TEI ``/decode``: token ids (as ``/tokenize`` gives them) back to text, per list of ids: the words
    joined by spaces (the tokenizers split on whitespace, so this is the text the model saw); an unknown
    word comes back as ``UNK``. ``skip_special_tokens`` (default true) leaves out ``<eos>``."""
    ids = body.ids
    seqs = [ids] if not ids or isinstance(ids[0], int) else ids
    entry = registry.get(None)

    def words() -> list[str]:
        return entry.decode(seqs, skip_special=body.skip_special_tokens)  # type: ignore[arg-type]

    # each id echoes a word: within max_answer_bytes; off the loop (the first decode of a version builds
    # its table's reverse index: a skip-thoughts table has about 930,000 words)
    return await answer_made_off_loop(words, limit=limit_of(request))


@router.post("/embed_all", response_model=list[list[list[float]]], response_class=VectorJSONResponse)
async def embed_all(body: TEIEmbedAllRequest, request: Request, registry: RegistryDep) -> Response:
    """TEI ``/embed_all``: per input, the encoder's raw state after each token it steps on (``<eos>``
    included where the model appends it), one row per token, not normalised. The last row, normalised as
    the model does (L2; then abs on order models; skip-thoughts' uni and bi halves separately), is the
    ``/embed`` vector. Row t is the state the encoder reaches on the first t + 1 tokens (for bi-skip's
    backward half: its state after reading those tokens from the last back). A request carries at most
    max_sentences tokens in all (one row each: the answer is as large as the largest ``/embed``)."""
    _no_prompt(body.prompt_name)
    texts = text_inputs(body.inputs)
    bound = AnswerBound(request, what="token states")
    work = encode_token_states(
        registry, None, texts, truncate=bool(body.truncate), keep_end=body.truncation_direction == "left",
        admit=bound.admit,
    )  # fmt: skip
    done = await cancel_on_disconnect(request, work)
    return await bound.send([np.ascontiguousarray(s, dtype=np.float32) for s in done.states], done.timing)
