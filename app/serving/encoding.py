"""One call per use of a model, without HTTP: ``/encode``, ``/v1/embeddings``, the TEI routes and
``/score`` each make one of these calls, and shape its result into their answer.

Each call looks the model up, checks the request against the limits once, in order (the model's
``dimensions``, then the count: that error before the answer's size), lets the caller refuse the answer's
size before any work (``admit``), then tokenises and encodes through the model's micro-batcher. The rules
themselves live with their owners: the defaults (eos, normalise) in the ``Engine``, the count and
``max_tokens`` limits in the ``ModelEntry``, the finite-vector check in the runtime (``finite_parts``).
``lnserve encode`` runs ``Engine.encode`` itself: the same result (``Encoded``), with no server limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...converters.families import has_image_encoder
from ..runtime.engine import Encoded
from ..runtime.errors import EncodeInputError
from ..runtime.retrieval import Metric, metric_for
from ..runtime.scoring import error_matrix
from .errors import TooManySentencesError
from .registry import ModelEntry, ModelRegistry
from .timing import JobTiming

# (rows, dim) of the answer about to be made: the caller raises to refuse it before any work is done
Admit = Callable[[int, int], None]


def admit_any(rows: int, dim: int) -> None:
    """Every answer size is fine (a caller with nothing to bound)."""


@dataclass
class EncodedTexts(Encoded):
    """``Engine.encode``'s result as served: the vectors, token and unknown counts, the model that made
    them and the micro-batcher job's times."""

    model: str
    timing: JobTiming


@dataclass
class TokenStates:
    """Per text, the encoder's raw state after each token it steps on (one row per token)."""

    states: list[np.ndarray]
    model: str
    timing: JobTiming


@dataclass
class EncodedImages:
    vectors: np.ndarray
    model: str
    timing: JobTiming


@dataclass
class CaptionsAndImages:
    """Captions and image features encoded together (``encode_both``): either may be None (none given),
    with the times of the jobs that ran."""

    texts: np.ndarray | None
    images: np.ndarray | None
    timings: tuple[JobTiming, ...]


@dataclass
class Scores:
    """The caption x image error matrix (lower is better), its metric and the two jobs' times."""

    errors: np.ndarray
    model: str
    metric: Metric
    timings: tuple[JobTiming, ...]


def check_dimensions(entry: ModelEntry, dimensions: int | None) -> None:
    """``dimensions`` (OpenAI, TEI) can only be the model's own: these encoders have no shorter prefix."""
    dim = entry.manifest["dims"]["output_dim"]
    if dimensions is not None and dimensions != dim:
        raise EncodeInputError(f"dimensions={dimensions} is not supported: model {entry.name!r} gives {dim}")


async def encode_texts(
    registry: ModelRegistry,
    model: str | None,
    texts: list[str],
    *,
    pretokenized: bool = False,
    eos: bool | None = None,
    truncate: bool = False,
    keep_end: bool = False,
    normalize: bool | None = None,
    dimensions: int | None = None,
    admit: Admit = admit_any,
) -> EncodedTexts:
    """``texts`` encoded by ``model`` (None: the default one) through its micro-batcher. ``eos`` and
    ``normalize`` None: the model's defaults; ``keep_end``: truncation keeps the last tokens."""
    entry = registry.get(model)
    check_dimensions(entry, dimensions)
    entry.check_count(len(texts))  # too many: that error, not the answer's size
    admit(len(texts), entry.manifest["dims"]["output_dim"])
    seqs = await entry.token_ids_async(
        texts, pretokenized=pretokenized, eos=eos, truncate=truncate, keep_end=keep_end
    )
    vectors, timing = await entry.encode_ids_timed(seqs, normalize=normalize)
    return EncodedTexts(vectors, [len(s) for s in seqs], entry.unk_counts(seqs), entry.name, timing)


async def encode_token_states(
    registry: ModelRegistry,
    model: str | None,
    texts: list[str],
    *,
    truncate: bool = False,
    keep_end: bool = False,
    admit: Admit = admit_any,
) -> TokenStates:
    """TEI's ``/embed_all``: per text, the raw state after each token (``<eos>`` included where the model
    appends it). A request carries at most ``max_sentences`` texts, and as many tokens in all (one row
    each: the answer is as large as the largest ``/embed``)."""
    entry = registry.get(model)
    entry.check_count(len(texts))
    seqs = await entry.token_ids_async(
        texts, pretokenized=False, eos=None, truncate=truncate, keep_end=keep_end
    )
    rows = sum(map(len, seqs))
    TooManySentencesError.check(rows, entry.settings.max_sentences, "tokens")
    admit(rows, entry.manifest["dims"]["output_dim"])
    # every prefix of every sentence, encoded raw by the same batcher and graph as /embed: the last state of
    # the prefix of t + 1 tokens is the state after token t (the recurrences run forwards, from zero)
    prefixes = [seq[: t + 1] for seq in seqs for t in range(len(seq))]
    states, timing = await entry.encode_ids_timed(prefixes, normalize=False)
    per_text = np.split(states, np.cumsum([len(s) for s in seqs])[:-1])
    return TokenStates(per_text, entry.name, timing)


async def encode_images(
    registry: ModelRegistry, model: str | None, features: list[list[float]], *, admit: Admit = admit_any
) -> EncodedImages:
    """CNN feature rows mapped into the model's space (order-embedding models only)."""
    entry = registry.get(model)
    entry.check_count(len(features))
    admit(len(features), entry.manifest["dims"]["output_dim"])
    vectors, timing = await entry.encode_images_timed(features)
    return EncodedImages(vectors, entry.name, timing)


async def score(
    registry: ModelRegistry,
    model: str | None,
    captions: list[str],
    images: list[list[float]],
    *,
    pretokenized: bool = False,
    truncate: bool = False,
    admit: Callable[[], None] = lambda: None,
) -> Scores:
    """Every caption against every image with the model's own error (order-embedding models only); the
    captions and images are encoded concurrently, as galleries are built (the model's defaults)."""
    entry = registry.get(model)
    if not has_image_encoder(entry.manifest):
        raise EncodeInputError(
            f"model {entry.name!r} is {entry.manifest.get('family')}: /score needs an order-embedding model "
            "(caption x image scores)"
        )
    TooManySentencesError.check(len(captions), entry.settings.max_sentences, "captions")
    TooManySentencesError.check(len(images), entry.settings.max_sentences, "images")
    admit()
    both = await encode_both(entry, captions, images, pretokenized=pretokenized, truncate=truncate)
    assert both.texts is not None and both.images is not None  # ScoreRequest: at least one of each
    method = entry.manifest["options"]["method"]
    errors = await asyncio.to_thread(error_matrix, both.texts, both.images, method)
    return Scores(errors, entry.name, metric_for(method, entry.manifest["family"]), both.timings)


async def encode_both(
    entry: ModelEntry, captions: list[str], images: list[list[float]], *, pretokenized: bool, truncate: bool
) -> CaptionsAndImages:
    """Captions and image features through the batcher at once, with the model's defaults (``/score``, and
    galleries: items and queries). The caller has checked the counts. Either list may be empty (its
    result is then None); if one job fails, the other is cancelled (withdrawn from the queue) before the
    error propagates, as it is when the caller is cancelled."""
    seqs = (
        await entry.token_ids_async(captions, pretokenized=pretokenized, eos=None, truncate=truncate)
        if captions
        else []
    )
    jobs: list[asyncio.Task[tuple[np.ndarray, JobTiming]] | None] = [None, None]
    try:
        async with asyncio.TaskGroup() as group:
            if captions:
                jobs[0] = group.create_task(entry.encode_ids_timed(seqs, normalize=None))
            if images:
                jobs[1] = group.create_task(entry.encode_images_timed(images))
    except BaseExceptionGroup as failed:  # the first job's own error, as if it had run alone
        raise failed.exceptions[0] from None
    done = [job.result() if job else None for job in jobs]
    vectors = [d[0] if d else None for d in done]
    return CaptionsAndImages(vectors[0], vectors[1], tuple(d[1] for d in done if d))
