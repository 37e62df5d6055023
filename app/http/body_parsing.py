"""Large JSON request bodies are parsed and validated in a worker process, never on the event loop.

Parsing is GIL-bound C code: a 4 MiB body of a million one-number rows (``{"features": [[0], [0], ...]}``)
takes ~0.9 s of ``json.loads`` plus pydantic validation, and a thread does not help because the parser
never releases the GIL, so ``/health`` and every other request would wait that long. Bodies over
``INLINE_PARSE_BYTES`` therefore go to one worker process (spawned on first use) that validates them with
the route's own pydantic model (``model_validate_json``: the same rules, ``extra="forbid"`` included) and
applies the per-request count limit (``max_sentences``) there, so a body with too many rows is refused
(422 ``too_many_sentences``) before a single Python object of it exists in the server. Only a body within
the limits comes back, as the validated model, which FastAPI then takes as is. Smaller bodies are parsed
inline: a thread hop and a process round trip cost more than they do.

A small body holding a surrogate escape (``\\ud800``), or bytes that are not UTF-8 (a raw surrogate
``ED A0 80``, an overlong form, a lone continuation byte, ``FF``), is also validated with the route's model
inline, so that every body, whatever its size, is read by the same parser: pydantic's refuses a lone
surrogate and any invalid UTF-8 (422 ``invalid_request``) where ``json.loads`` would let through text no
response can be encoded with (it decodes bytes with ``surrogatepass``: ``ED A0 80`` became ``\\ud800``).

One worker bounds the CPU that large bodies can take; they queue behind each other, and the number of
requests in flight is bounded by ``max_inflight``. The worker dies with the server, even one killed with
SIGKILL (parent-death signal), so it never outlives it holding memory.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

import fastapi.routing
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ..serving.errors import TooManySentencesError
from .deps import runtime_dependant
from .errors import BodyParserError, is_json
from .schemas.counted import Counted

log = logging.getLogger("lnserve.body")

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
INLINE_PARSE_BYTES = 64 * 1024  # measured: ~1 ms to parse inline; a 64 KiB body of tiny rows ~7 ms
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a UTF-16 surrogate, maybe unpaired


def _validate(model: type[BaseModel], raw: bytes, max_items: int) -> BaseModel | list[dict[str, Any]]:
    """Worker process: the validated model, or the validation errors (loc, msg, type; never the input)."""
    try:
        body = model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        return [{"loc": ("body", *e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
    if isinstance(body, Counted):  # the body model says how many items it carries (``schemas.counted``)
        TooManySentencesError.check(body.item_count(), max_items, body.count_label)
    return body


def _validated(model: type[BaseModel], raw: bytes, max_items: int) -> BaseModel:
    """``_validate`` in this process (a small body): the model, or RequestValidationError."""
    result = _validate(model, raw, max_items)
    if isinstance(result, list):
        raise RequestValidationError(result)
    return result


def _worker_init(parent: int) -> None:
    """The worker dies with the server: a server killed with SIGKILL never runs its shutdown, and a worker
    that outlived it (and kept multiprocessing's resource tracker alive) held its memory forever.

    Ctrl-C reaches the whole process group: the worker ignores SIGINT and is stopped by the server's
    shutdown. SIGTERM keeps its default, so that the worker can be stopped on its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)


def die_with_parent(parent: int) -> None:
    """End this process when ``parent`` exits: the kernel's parent-death signal on Linux, else (or if that
    fails) a daemon thread that polls the parent's pid once a second."""
    if not _set_parent_death_signal():
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="watch-parent").start()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def _set_parent_death_signal() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)``: True when the kernel took it (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


class BodyParser:
    """The worker process that parses large bodies, created on first use."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init,
                initargs=(os.getpid(),),
            )
        return self._pool

    async def parse(self, model: type[BaseModel], raw: bytes, *, max_items: int) -> BaseModel:
        """``model`` from the JSON ``raw``, validated off the event loop.

        Raises:
            RequestValidationError: not JSON, or not the schema (422 invalid_request).
            TooManySentencesError: more than ``max_items`` items (422 too_many_sentences).
            BodyParserError: the worker died (500); the next call starts a new one.
        """
        pool = self._executor()
        try:
            result = await asyncio.wrap_future(pool.submit(_validate, model, raw, max_items))
        except BrokenProcessPool:
            log.error("the body-parsing worker process died; starting a new one")
            if self._pool is pool:
                self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise BodyParserError("the request body could not be parsed (worker process died)") from None
        if isinstance(result, list):
            raise RequestValidationError(result)
        return result

    def close(self) -> None:
        """Stop the worker without waiting for queued bodies (their requests have been answered)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def needs_strict_parse(raw: bytes) -> bool:
    """A small body that ``json.loads`` would turn into text no answer can be written with: a surrogate
    escape, or bytes that are not strict UTF-8 (which has no encoded surrogates)."""
    if _SURROGATE_ESCAPE.search(raw) is not None:
        return True
    if raw.isascii():
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@contextmanager
def _solving_only_what_runs(route: APIRoute) -> Iterator[None]:
    """While FastAPI builds ``route``'s request handler, its dependant (the included route's, where FastAPI
    keeps one per inclusion) lacks the declaration-only dependencies (``deps.runtime_dependant``); the
    OpenAPI schema, built later from the same attribute, still has them. A FastAPI without the per-inclusion
    context builds from the route's own dependant, which is swapped the same way."""
    context_var = getattr(fastapi.routing, "_effective_route_context_var", None)
    context = context_var.get() if context_var is not None else None
    target: Any = context if getattr(context, "original_route", None) is route else route
    declared = getattr(target, "dependant", None)
    if not isinstance(declared, Dependant):
        yield
        return
    target.dependant = runtime_dependant(declared)
    try:
        yield
    finally:
        target.dependant = declared


class OffloadedBodyRoute(APIRoute):
    """An ``APIRoute`` whose JSON body, when larger than ``INLINE_PARSE_BYTES``, is parsed by the app's
    ``BodyParser`` (``app.state.body_parser``) before FastAPI's handler runs; FastAPI then takes the
    validated model as the body. Routers with request bodies use it as their ``route_class``. Its handler
    solves only the dependencies that do something (``_solving_only_what_runs``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        with _solving_only_what_runs(self):
            handler = super().get_route_handler()
        field = self.body_field
        model = field.field_info.annotation if field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return handler

        async def offloaded(request: Request) -> Response:
            raw = await request.body()  # read already (the middleware): FastAPI gets the same bytes
            large = len(raw) > INLINE_PARSE_BYTES
            # the content type only for the bodies parsed here: nearly every body is small and plain
            if (large or needs_strict_parse(raw)) and is_json(request):
                limit = request.app.state.settings.max_sentences
                # request.json() is cached in _json: FastAPI takes the validated model as is
                if large:
                    parser: BodyParser = request.app.state.body_parser  # create_app's, always there
                    request._json = await parser.parse(model, raw, max_items=limit)
                else:
                    request._json = _validated(model, raw, limit)
            return await handler(request)

        return offloaded

    def own_error(self, request: Request, exc: Exception) -> Response | None:
        """This route's own answer to ``exc``, raised by its handler, before the app's error handlers see it
        (None: theirs). ``fast_routes`` asks it too."""
        return None
