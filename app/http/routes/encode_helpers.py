"""What every encoding route shares (``/encode``, ``/v1/embeddings``, the TEI routes, ``/score``): the
texts of an OpenAI or TEI ``input``, an answer of vectors bounded by ``max_answer_bytes``, and the model
jobs' times recorded for the timing headers and metrics. The encoding itself is one call into
``serving.encoding``, whose result carries the times."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import Response

from ...runtime.errors import EncodeInputError
from ...serving.timing import JobTiming, RequestTiming
from ..answers import check_answer_bytes, json_answer, limit_of, small, vectors_bytes
from ..errors import TokenIdsUnsupportedError
from ..middleware import REQUEST_TIMING


class AnswerBound:
    """One answer within ``max_answer_bytes``: ``admit`` (handed to ``serving.encoding``, which calls it
    once the count is known good and before any work) refuses an answer of vectors over the bound, 413
    ``answer_too_large``; ``send`` writes the answer, small ones on the loop."""

    def __init__(self, request: Request, encoding: str = "float", *, per_row: int = 0, what: str = "vectors"):
        self.limit, self.encoding, self.per_row, self.what = limit_of(request), encoding, per_row, what
        self.request = request
        self.size = 0

    def admit(self, rows: int, dim: int) -> None:
        """``rows`` vectors of ``dim`` numbers (and ``per_row`` bytes of wrapping each)."""
        self.check(vectors_bytes(rows, dim, self.encoding) + rows * self.per_row, f"{rows} {self.what}")

    def check(self, size: int, what: str) -> None:
        """An answer of about ``size`` bytes (``what``: how it is made)."""
        self.size = size
        check_answer_bytes(size, self.limit, what)

    async def send(self, answer: Any, *timings: JobTiming) -> Response:
        record_timings(self.request, *timings)
        return await json_answer(answer, limit=self.limit, inline=small(self.size))


def record_timings(request: Request, *timings: JobTiming) -> None:
    """The model jobs a request ran, as their results brought them back: into the ``RequestTiming`` the
    middleware opened (``X-Queue-Time-Ms``, ``X-Inference-Time-Ms``, ``X-Batch-Size`` and the metrics)."""
    timing: RequestTiming | None = request.scope.get("state", {}).get(REQUEST_TIMING)
    if timing is not None:
        timing.record(*timings)


def text_inputs(inputs: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    """The texts of an ``input`` (OpenAI) or ``inputs`` (TEI) field; token ids are refused."""
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not texts:
        raise EncodeInputError("input is an empty list")
    if not all(isinstance(t, str) for t in texts):
        raise TokenIdsUnsupportedError()
    return texts  # type: ignore[return-value]
