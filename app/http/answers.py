"""Answers whose size is a multiple of the request: bounded by ``max_answer_bytes`` and written off the loop.

A small request can ask for a huge answer: ``/retrieve`` with 256 queries and ``k=1000`` over items with
1 KB payloads made 268 MB of JSON from 13 KB, held ``/health`` for 2.8 s and took the server to 1 GB. So:

* Each such route says up front how large its answer can be (``vectors_bytes``: vectors, score matrices;
  ``hits_bytes``: the least a page of search hits takes) and is refused before any work, 413
  ``answer_too_large``, when that is over the bound.
* Every such answer is written by ``json_answer``: small ones at once, larger ones in a worker thread and in
  pieces (``orjson`` holds the GIL for the whole of one call: one call over 268 MB is 0.8 s in which no
  other thread runs, so the loop would wait even for a thread). The pieces are counted as they are written,
  and an answer whose size could not be known up front (search hits with their payloads, echoed tokens) is
  refused the same way as soon as it passes the bound; nothing of it has been sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..serving.memory import trim_heap
from .errors import AnswerTooLargeError

# the most orjson writes for one float32 with its separator ("-1.2345678e-05,"): an upper bound, so an answer
# of vectors that passes the check up front cannot pass the bound when written
FLOAT_BYTES = 16
# the least one search hit takes ({"id":"x","score":0.0,"payload":null}): a lower bound, so the check up
# front refuses only what cannot fit; payloads are counted while the answer is written
MIN_HIT_BYTES = 38
INLINE_ANSWER_BYTES = 256 << 10  # estimated under it: written on the loop (a thread hop costs more: ~1 ms)
_PIECE_BYTES = 256 << 10  # one orjson call writes about this much: the GIL is free between calls
_SPLIT_DEPTH = 3  # answer -> results -> per query -> hits: deeper values are written whole
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def limit_of(request: Request) -> int:
    """This server's ``max_answer_bytes``."""
    return int(request.app.state.settings.max_answer_bytes)


def check_answer_bytes(estimate: int, limit: int, what: str) -> None:
    """Refuse, before any work, an answer of ``estimate`` bytes over ``limit`` (``what``: how it is made)."""
    if estimate > limit:
        raise AnswerTooLargeError(
            f"the answer ({what}) would take about {estimate} bytes, over max_answer_bytes={limit}: "
            "split the request"
        )


def vectors_bytes(rows: int, dim: int, encoding: str = "float") -> int:
    """The most ``rows`` vectors of ``dim`` numbers take: float JSON, or base64 of little-endian float32."""
    if encoding == "base64":
        return rows * (4 * math.ceil(dim * 4 / 3) + 3)
    return rows * (dim * FLOAT_BYTES + 2)


def hits_bytes(queries: int, k: int, live: int) -> int:
    """The least ``queries`` lists of ``min(k, live)`` search hits take, payloads not counted."""
    return queries * min(k, live) * MIN_HIT_BYTES


async def json_answer(content: Any, *, limit: int, inline: bool) -> Response:
    """``content`` as a JSON response within ``limit`` bytes: at once when ``inline`` (an answer known to be
    small), else in a worker thread and in pieces. Raises AnswerTooLargeError."""
    if inline:
        body = _dumps(content)
        if len(body) > limit:
            raise _over(len(body), limit)
    else:
        body = await made_off_loop(lambda: content, limit)
    return Response(body, media_type="application/json")


async def answer_made_off_loop(make: Callable[[], Any], *, limit: int) -> Response:
    """The answer that ``make`` builds, built, written and freed in a worker thread: a large answer is many
    objects (256,000 search hits), and freeing them on the loop stalls it as writing them did."""
    return Response(await made_off_loop(make, limit), media_type="application/json")


async def made_off_loop(make: Callable[[], Any], limit: int) -> bytes:
    """``render(make(), limit)`` in a worker thread. A refusal comes back without its traceback, whose frames
    would keep the answer's objects (and the pieces written) alive until the loop dropped them."""
    result = await asyncio.to_thread(_made, make, limit)
    if isinstance(result, AnswerTooLargeError):
        raise result
    return result


def _made(make: Callable[[], Any], limit: int) -> bytes | AnswerTooLargeError:
    size = TRIM_AFTER_BYTES  # a refused answer was a large one
    try:
        with _collector_paused():  # resumed once the answer's objects are freed, a refused one's too
            try:
                body = render(make(), limit)
                size = len(body)
                return body
            except AnswerTooLargeError as exc:
                return exc.with_traceback(None)
    finally:
        # glibc kept what a large answer's objects freed (RSS 100-200 MB up after a series of them); a
        # trim walks every arena, so not after each of the many answers just past INLINE_ANSWER_BYTES
        if size >= TRIM_AFTER_BYTES:
            trim_heap()


TRIM_AFTER_BYTES = 8 << 20
_paused = 0
_paused_lock = threading.Lock()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No automatic garbage collection while a large answer is built and written. Its objects (a search hit
    each: 256,000 of them) are young and many, so the collector ran full passes over them again and again,
    each holding the GIL, and the event loop with it, for 0.2-0.4 s. They hold no cycles: reference counts
    free them when the answer is written. Counted, so that concurrent answers resume it only when the last
    one is done; a collection still runs when asked for."""
    global _paused
    with _paused_lock:
        _paused += 1
        if _paused == 1:
            gc.disable()
    try:
        yield
    finally:
        with _paused_lock:
            _paused -= 1
            if _paused == 0:
                gc.enable()


def small(estimate: int) -> bool:
    """An answer of at most ``estimate`` bytes is written on the loop (a thread hop costs more)."""
    return estimate <= INLINE_ANSWER_BYTES


def render(content: Any, limit: int) -> bytes:
    """``content`` as JSON (what ``orjson.dumps`` writes) in pieces of about ``_PIECE_BYTES``, refused with
    AnswerTooLargeError as soon as it passes ``limit``."""
    parts: list[bytes] = []
    total = 0
    for piece in _pieces(content, 0):
        total += len(piece)
        if total > limit:
            raise _over(total, limit, partial=True)
        parts.append(piece)
    return b"".join(parts)


def _over(size: int, limit: int, *, partial: bool = False) -> AnswerTooLargeError:
    more = "more than " if partial else ""
    return AnswerTooLargeError(
        f"the answer takes {more}{size} bytes, over max_answer_bytes={limit}: ask for fewer results "
        "(a smaller k, fewer queries or items) or smaller payloads"
    )


def _pieces(value: Any, depth: int) -> Iterator[bytes]:
    """The JSON of ``value``: objects and arrays down to ``_SPLIT_DEPTH`` are written a slice at a time (the
    slice grows while its JSON stays under ``_PIECE_BYTES``), anything deeper in one call."""
    if depth < _SPLIT_DEPTH and isinstance(value, dict):
        yield b"{"
        for i, (key, item) in enumerate(value.items()):
            yield (b"," if i else b"") + orjson.dumps(key) + b":"
            yield from _pieces(item, depth + 1)
        yield b"}"
    elif depth < _SPLIT_DEPTH and (
        isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim >= 1)
    ):
        yield b"["
        start, step = 0, 1
        while start < len(value):
            chunk = value[start : start + step]
            if step == 1 and isinstance(chunk, list | tuple):  # one element, maybe big: split it too
                if start:
                    yield b","
                written = 0
                for piece in _pieces(chunk[0], depth + 1):
                    written += len(piece)
                    yield piece
            else:
                text = _dumps(chunk)
                yield (b"" if start == 0 else b",") + text[1:-1]
                written = len(text)
            start += step
            step = step * 2 if written < _PIECE_BYTES // 2 else max(1, step // 2)
        yield b"]"
    else:
        yield _dumps(value)


def _dumps(value: Any) -> bytes:
    """orjson's JSON; what it cannot write (payloads are any JSON: an integer past 64 bits, nesting past 255
    levels) is written by the standard library, as the payload was when it was stored."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8")
