"""What every text-encoding route shares (``/encode``, ``/v1/embeddings``, the TEI routes): tokenise within
the limits, encode through the model's micro-batcher, and withdraw the work if the client goes away."""

from __future__ import annotations

import numpy as np
from fastapi import Request

from ...runtime.errors import EncodeInputError
from ...serving.registry import ModelEntry
from ..deps import cancel_on_disconnect
from ..errors import TokenIdsUnsupportedError


async def encode_texts(
    request: Request,
    entry: ModelEntry,
    texts: list[str],
    *,
    pretokenized: bool = False,
    eos: bool | None = None,
    truncate: bool = False,
    keep_end: bool = False,
    normalize: bool | None = None,
) -> tuple[np.ndarray, list[list[int]]]:
    """The vectors (N x dim, float32) and the token ids they were computed from."""
    seqs, _ = await entry.prepare_async(
        texts, pretokenized=pretokenized, eos=eos, truncate=truncate, keep_end=keep_end
    )
    vectors = await cancel_on_disconnect(request, entry.encode_ids(seqs, normalize=normalize))
    return vectors, seqs


def check_dimensions(entry: ModelEntry, dimensions: int | None) -> None:
    """``dimensions`` (OpenAI, TEI) can only be the model's own: these encoders have no shorter prefix."""
    dim = entry.manifest["dims"]["output_dim"]
    if dimensions is not None and dimensions != dim:
        raise EncodeInputError(f"dimensions={dimensions} is not supported: model {entry.name!r} gives {dim}")


def text_inputs(inputs: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    """The texts of an ``input`` (OpenAI) or ``inputs`` (TEI) field; token ids are refused."""
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not texts:
        raise EncodeInputError("input is an empty list")
    if not all(isinstance(t, str) for t in texts):
        raise TokenIdsUnsupportedError()
    return texts  # type: ignore[return-value]
