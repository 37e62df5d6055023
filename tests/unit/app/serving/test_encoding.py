"""``serving.encoding``: one call per use. ``encode_texts`` gives what ``Engine.encode`` gives (the CLI's
call), with the model's name and the job's times; the limits are checked once each, in order, before the
caller's ``admit`` and before any work."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.errors import EncodeInputError
from lnserve.app.serving.encoding import encode_both, encode_texts, score
from lnserve.app.serving.errors import TooManySentencesError
from lnserve.app.serving.registry import ModelRegistry
from lnserve.app.serving.timing import RequestTiming, current_timing
from lnserve.app.settings import Settings

TEXTS = ["a red circle on the left", "a blue square", "zzqx unknownword a"]


def _with_registry(settings: Settings, use: Callable[[ModelRegistry], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        registry = ModelRegistry(settings)
        await registry.open()
        await registry.load()
        try:
            return await use(registry)
        finally:
            await registry.close()

    return asyncio.run(run())


def test_encode_texts_gives_what_engine_encode_gives() -> None:
    async def use(registry: ModelRegistry) -> Any:
        return await encode_texts(registry, None, TEXTS), registry.entries[registry.default_name or ""].path

    done, path = _with_registry(Settings(threads=1), use)
    expected = Engine.open(path, threads=1).encode(TEXTS)
    np.testing.assert_allclose(done.vectors, expected.vectors, rtol=0, atol=1e-6)
    assert (done.token_counts, done.unk_counts) == (expected.token_counts, expected.unk_counts)
    assert done.unk_counts[2] > 0
    assert done.timing.batch_size >= len(TEXTS) and done.timing.inference_s > 0
    assert done.model


@pytest.mark.parametrize(
    ("texts", "dimensions", "refused"),
    [
        (TEXTS, 7, EncodeInputError),  # the model's dimension first
        (TEXTS, None, TooManySentencesError),  # then the count: admit is never asked
        (TEXTS[:2], None, None),  # within the limits: admit decides, before any work
    ],
)
def test_limits_are_checked_in_order_before_admit_and_before_any_work(
    texts: list[str], dimensions: int | None, refused: type[Exception] | None
) -> None:
    asked: list[tuple[int, int]] = []

    class Refused(Exception):
        pass

    def admit(rows: int, dim: int) -> None:
        asked.append((rows, dim))
        raise Refused

    async def use(registry: ModelRegistry) -> RequestTiming:
        timing = RequestTiming()
        token = current_timing.set(timing)
        try:
            with pytest.raises(refused or Refused):
                await encode_texts(registry, None, texts, dimensions=dimensions, admit=admit)
        finally:
            current_timing.reset(token)
        return timing

    timing = _with_registry(Settings(threads=1, max_sentences=2), use)
    assert timing.jobs == 0  # nothing was encoded
    assert len(asked) == (1 if refused is None else 0)
    if asked:
        assert asked[0][0] == len(texts) and asked[0][1] > 0


def test_timings_come_back_with_the_results_not_through_the_request_context() -> None:
    """The results carry their jobs' times (the route records them into the request's timing); the batcher
    writes nothing into the context the middleware opened (one channel, not two)."""

    async def use(registry: ModelRegistry) -> tuple[Any, Any, RequestTiming]:
        timing = RequestTiming()
        token = current_timing.set(timing)
        try:
            texts = await encode_texts(registry, None, TEXTS[:2])
            scores = await score(registry, None, TEXTS[:2], [[1.0] * 120] * 3)
        finally:
            current_timing.reset(token)
        return texts, scores, timing

    texts, scores, timing = _with_registry(Settings(threads=1), use)
    assert texts.timing.batch_size >= 2 and texts.timing.inference_s > 0
    assert sorted(t.batch_size for t in scores.timings) == [2, 3]  # the captions' job and the images' job
    assert scores.errors.shape == (2, 3)
    assert timing.jobs == 0


def _encode_both(registry: ModelRegistry, captions: list[str], images: list[list[float]]) -> Awaitable[Any]:
    return encode_both(registry.get(None), captions, images, pretokenized=False, truncate=False)


def _score(registry: ModelRegistry, captions: list[str], images: list[list[float]]) -> Awaitable[Any]:
    return score(registry, None, captions, images)


@pytest.mark.parametrize("call", [_encode_both, _score], ids=["encode_both (galleries)", "score"])
def test_when_one_job_fails_its_sibling_is_withdrawn_from_the_queue(
    call: Callable[[ModelRegistry, list[str], list[list[float]]], Awaitable[Any]],
) -> None:
    """Captions and images are encoded concurrently; image rows of the wrong width are refused once the
    captions' job is queued. The captions' job must go too (``asyncio.gather`` left it in the queue, to run
    for nobody): the batcher waits ``max_wait_ms`` for company, so a job left behind is still counted."""

    async def use(registry: ModelRegistry) -> tuple[int, int]:
        batcher = registry.get(None).batcher
        with pytest.raises(EncodeInputError, match="feature row 0 has 7 values"):
            await call(registry, TEXTS, [[1.0] * 7])
        left = batcher.depth
        await call(registry, TEXTS[:1], [[1.0] * 120])  # the model still serves
        return left, batcher.depth

    left, after = _with_registry(Settings(threads=1, max_wait_ms=2000, max_batch_size=64), use)
    assert left == 0
    assert after == 0
