"""The hot JSON routes (``POST /encode``, ``/v1/embeddings``, ``/embed``) answered below FastAPI's per-request
machinery, with the same handler, the same model and the same error handlers.

Under load FastAPI's layers between the guards (``RequestContextMiddleware``) and a handler (its exception
middleware, the exit stack, the router's match, the request handler's body parse through ``json.loads`` and
the solve of its dependencies) took more of the event loop's CPU per ``/encode`` than the route and the
model together (``benchmarks/http_profile.py``). ``FastRoutes`` sits just inside the guards (and inside
CORS, so every guard still runs) and answers a request for one of these routes itself when its body is one
FastAPI would parse inline anyway: JSON (``application/json``), at most ``INLINE_PARSE_BYTES``, plain UTF-8
without surrogate escapes, and valid for the route's model (``model_validate_json``: pydantic straight from
the bytes). The handler (the route's own function) is then called with the model and the request, its
errors go to the app's own exception handlers, and its response is written as FastAPI would write it.

Every other request to these paths goes on to FastAPI unchanged, its body as read: a body that is not valid
(FastAPI's ``json.loads`` and its validation write the 422 it always wrote), a large one (the parsing
worker, ``body_parsing``, with its count limits), another content type or method. The OpenAPI schema is the
routes' declarations, untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .body_parsing import INLINE_PARSE_BYTES, OffloadedBodyRoute, needs_strict_parse
from .body_reading import replay
from .deps import runtime_dependant

Handler = Callable[[Request, Exception], Any]


class FastEndpoint:
    """One route whose handler takes only its body model and the request (anything else it declares would
    need FastAPI's solve: refused here, when the app is built)."""

    def __init__(self, route: OffloadedBodyRoute) -> None:
        dependant = runtime_dependant(route.dependant)
        field = route.body_field
        model = field.field_info.annotation if field is not None else None
        plain = not (
            dependant.dependencies or dependant.path_params or dependant.query_params
            or dependant.header_params or dependant.cookie_params
        )  # fmt: skip
        if not (
            plain
            and isinstance(model, type)
            and issubclass(model, BaseModel)
            and dependant.request_param_name
        ):
            raise TypeError(f"{route.path}: a fast route takes only its body model and the request")
        if not inspect.iscoroutinefunction(route.endpoint):
            raise TypeError(f"{route.path}: a fast route's handler is async")
        self.route, self.model = route, model
        self.body_name = dependant.body_params[0].name
        self.request_name = dependant.request_param_name

    def parse(self, scope: Scope, raw: bytes) -> BaseModel | None:
        """The body as the route's model, or None where FastAPI must take it (see the module)."""
        if len(raw) > INLINE_PARSE_BYTES or not _json_content(scope) or needs_strict_parse(raw):
            return None
        try:
            return self.model.model_validate_json(raw)
        except ValidationError:  # FastAPI writes the error it always wrote
            return None

    async def run(self, body: BaseModel, request: Request, handlers: Mapping[Any, Handler]) -> Response:
        """The handler's response, or the app's handler's for what it raised (as FastAPI's exception
        middleware finds it: by the exception's classes, the 500 handler left to the guards)."""
        request.scope.update(route=self.route, endpoint=self.route.endpoint, path_params={})
        try:
            response: Response = await self.route.endpoint(
                **{self.body_name: body, self.request_name: request}
            )
        except Exception as exc:
            own = self.route.own_error(request, exc)  # TEI's 413s
            if own is not None:
                return own
            handler = _handler_for(handlers, exc)
            if handler is None:
                raise
            answered = handler(request, exc)
            response = await answered if inspect.isawaitable(answered) else answered
        return response


class FastRoutes:
    """Pure ASGI: requests for the ``routes`` (by method and path) answered by their ``FastEndpoint`` when it
    can; everything else, and the rest of those, to ``app`` (FastAPI's exception middleware and router)."""

    def __init__(
        self, app: ASGIApp, *, routes: Sequence[OffloadedBodyRoute], handlers: Mapping[Any, Handler]
    ) -> None:
        """``handlers``: the app's exception handlers (``app.exception_handlers``), read when needed."""
        self.app, self.handlers = app, handlers
        self.table = {(method, r.path): FastEndpoint(r) for r in routes for method in r.methods or ()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = None
        if scope["type"] == "http" and not scope.get("root_path"):  # mounted under a prefix: the router's
            endpoint = self.table.get((scope["method"], scope["path"]))
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        raw = await request.body()  # read whole by the guards already: replayed from memory
        body = endpoint.parse(scope, raw)
        if body is None:
            await self.app(scope, replay(raw, receive), send)
            return
        response = await endpoint.run(body, request, self.handlers)
        await response(scope, receive, send)


def _json_content(scope: Scope) -> bool:
    """``Content-Type: application/json`` (with parameters or not): what FastAPI parses as JSON, less the
    rare ``+json`` types and a missing type, which it still takes itself."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.partition(b";")[0].strip().lower() == b"application/json"
    return False


def _handler_for(handlers: Mapping[Any, Handler], exc: Exception) -> Handler | None:
    """The handler of ``exc``'s nearest class, as Starlette's exception middleware looks it up; the one of
    ``Exception`` (the 500) is not its: what nothing else handles goes on up, as it did."""
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in handlers:
            return handlers[cls]
    return None
