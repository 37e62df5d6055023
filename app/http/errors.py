"""HTTP errors: one code -> status table (``HTTP_STATUSES``) and one body shape, ``{"error": {...}}``.

Lower layers define errors with stable ``code``s only (``converters/errors.py``, ``app/runtime/errors.py``,
``app/galleries/errors.py``...); this module alone decides the HTTP status of each code. The service adds:

LnserveError
├── UserInputError (invalid_input, 422)
│   ├── TooManySentencesError  (too_many_sentences, 422)  more sentences / images than max_sentences
│   ├── SentenceTooLongError   (sentence_too_long, 422)   more tokens than max_tokens and no truncate
│   ├── TokenIdsUnsupportedError (token_ids_unsupported, 422) token ids instead of text (/v1/embeddings, TEI)
│   ├── ModelNotFoundError     (model_not_found, 404)     no model of that name
│   ├── RequestTooLargeError   (request_too_large, 413)   body larger than max_body_bytes
│   ├── AnswerTooLargeError    (answer_too_large, 413)    answer over max_answer_bytes (app.http.answers)
│   ├── RequestTimeoutError    (request_timeout, 408)     headers / body not in within their deadline
│   ├── UnauthorizedError      (unauthorized, 401)        API key missing or wrong
│   ├── ReloadDisabledError    (reload_disabled, 403)     reload with no API key set (and no opt-in)
│   ├── InvalidSettingError    (invalid_setting)          serve: a configuration mistake (app.settings)
│   ├── ModelLoadError         (model_load_failed)        serve: a model cannot load at startup (exit 2)
│   ├── AddressInUseError      (address_in_use)           serve: the port is taken (exit 2; app.http.server)
│   ├── BindError              (bind_failed)              serve: the address cannot be bound (app.http.server)
│   ├── MissingExtraError      (missing_extra)            CLI, serve start-up: an extra is not installed
│   └── GalleryError           (gallery_error, 422)       app.galleries.errors: /galleries, /retrieve
│       ├── GalleryNotFoundError  (gallery_not_found, 404) no gallery of that name
│       ├── GalleryExistsError    (gallery_exists, 409)    create with a taken name
│       ├── ItemNotFoundError     (item_not_found, 404)    no live item with that id
│       ├── DuplicateItemError    (duplicate_item, 409)    item id already in the gallery or the batch
│       ├── GalleryMismatchError  (gallery_mismatch, 422)  model or item / query kind not the gallery's
│       └── GalleryInputError     (invalid_input, 422)     bad name, vector shape, k, payload
│           └── InvalidItemIdError (invalid_item_id, 422) an item id no URL path segment can address
├── GalleryCorruptError        (gallery_corrupt, 503)     gallery files damaged: that gallery is quarantined
├── StorageFullError           (storage_full, 507)        a write ran out of disk space (lnserve.storage)
├── NotReadyError              (not_ready, 503)           models still loading / warming up
├── QueueFullError             (queue_full, 429)          the model's queue is full; has Retry-After
├── OverloadedError            (overloaded, 429)          max_inflight requests in flight; has Retry-After
├── ShuttingDownError          (shutting_down, 503)       draining for exit (app.serving.batcher)
├── ModelUnavailableError      (model_unavailable, 503)   the batcher died; restart (app.serving.batcher)
├── ShardUnavailableError      (shard_unavailable, 503)   a Ray gallery shard did not answer (app.scale)
├── ClusterLostError           (cluster_lost)             serve --ray: the cluster went away (CLI, exit 1)
├── DeadlineExceededError      (deadline_exceeded, 504)   queued past its deadline (app.serving.batcher)
├── ReloadFailedError          (reload_failed, 422)       new version failed to load (app.serving.registry)
├── ModelRenamedError          (model_renamed, 409)       the new version's manifest renames the model
├── ReloadBusyError            (reload_in_progress, 409)  serve --ray: another reload of it is staged
├── BatchError                 (internal_error, 500)      a batch failed (app.serving.batcher)
├── BodyParserError            (internal_error, 500)      the large-body parser process died
└── ClientClosedError          (client_closed_request, 499) the client went away; nobody reads it

Framework exceptions are in ``ERROR_TABLE``. A code missing from ``HTTP_STATUSES`` is 422 for a
``UserInputError`` (conversion and artifact codes), else 500. Any other exception is a generic 500
``internal_error`` that carries the request id; the traceback goes to the log only. ``http_error_codes()``
is every code the service can answer with (the README's errors table is tested against it).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from lnserve.errors import LnserveError, UserInputError

from ..serving.batcher import BatchError, ModelUnavailableError, QueueFullError, ShuttingDownError
from ..serving.errors import UnauthorizedError

log = logging.getLogger("lnserve.errors")

# re-exported: the whole table lives here
__all__ = ["BatchError", "ModelUnavailableError", "QueueFullError", "ShuttingDownError"]


class TokenIdsUnsupportedError(UserInputError):
    """Token ids instead of text (langchain-openai's default): ids from another tokenizer mean nothing to
    models with their own vocabularies."""

    code = "token_ids_unsupported"

    def __init__(self) -> None:
        super().__init__(
            "input is token ids, but lnserve's models have their own vocabularies and take text: send "
            "strings. langchain-openai sends token ids unless OpenAIEmbeddings(..., "
            "check_embedding_ctx_length=False)"
        )


class ReloadDisabledError(UserInputError):
    """A reload was asked of a server with no API key that was not told to allow it (an admin action that
    anyone could use to make the server load models over and over)."""

    code = "reload_disabled"


class RequestTimeoutError(UserInputError):
    """The request's headers or body did not arrive within ``header_timeout_s`` / ``body_timeout_s``."""

    code = "request_timeout"


# THE code -> HTTP status table: lower layers raise codes, only the app knows about HTTP
HTTP_STATUSES: dict[str, int] = {
    # the caller's input
    "invalid_input": 422,
    "invalid_request": 422,
    "too_many_sentences": 422,
    "sentence_too_long": 422,
    "token_ids_unsupported": 422,
    "gallery_error": 422,
    "gallery_mismatch": 422,
    "invalid_item_id": 422,
    "unauthorized": 401,
    "forbidden": 403,
    "model_not_found": 404,
    "gallery_not_found": 404,
    "item_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "gallery_exists": 409,
    "duplicate_item": 409,
    "reload_failed": 422,
    "reload_disabled": 403,
    "model_renamed": 409,
    "reload_in_progress": 409,
    "request_too_large": 413,
    "answer_too_large": 413,
    "request_timeout": 408,
    "unsupported_media_type": 415,
    # refused by the HTTP protocol layer, before the app sees the request (app.http.protocol_errors)
    "bad_request": 400,
    "uri_too_long": 414,
    "header_too_large": 431,
    # the service's load and state
    "queue_full": 429,
    "overloaded": 429,
    "client_closed_request": 499,
    "internal_error": 500,
    "not_ready": 503,
    "shutting_down": 503,
    "model_unavailable": 503,
    "gallery_corrupt": 503,
    "storage_full": 507,
    "shard_unavailable": 503,
    "replica_unavailable": 503,  # serve --ray: its proxy rewrites a dead replica's 5xx (app.scale.proxy)
    "cluster_lost": 503,  # serve --ray's driver, on the CLI only (app.scale.watch)
    "provider_unavailable": 503,
    "deadline_exceeded": 504,
}


def http_status(exc: LnserveError) -> int:
    """The HTTP status of an error: its code's row in ``HTTP_STATUSES``; an unlisted code is 422 for the
    caller's input (conversion, artifact codes), 500 for anything else."""
    return _status_of(type(exc))


def _status_of(cls: type[LnserveError]) -> int:
    status = HTTP_STATUSES.get(cls.code)
    if status is not None:
        return status
    return 422 if issubclass(cls, UserInputError) else 500


# framework exceptions -> (status, code)
ERROR_TABLE: dict[type[Exception], tuple[int, str]] = {
    RequestValidationError: (422, "invalid_request"),
}
HTTP_STATUS_CODES: dict[int, str] = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
}
# codes of ``HTTP_STATUSES`` that no request is answered with: GalleryError is a base (only its subclasses are
# raised); a strict provider fails the load; nothing raises Starlette's 403 / 415; Ray's shard_unavailable and
# replica_unavailable (answered only under serve --ray) and
# the CLI-only cluster_lost: see Scaling out
NOT_ANSWERED = frozenset(
    {
        "gallery_error",
        "provider_unavailable",
        "forbidden",
        "unsupported_media_type",
        "shard_unavailable",
        "replica_unavailable",
        "cluster_lost",
    }
)


def http_error_codes() -> dict[str, int]:
    """Every ``error.code`` the service can answer with, and its HTTP status: ``HTTP_STATUSES`` less
    ``NOT_ANSWERED`` (the docs' errors table is tested against it)."""
    return {code: status for code, status in sorted(HTTP_STATUSES.items()) if code not in NOT_ANSWERED}


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    request_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The one error body shape."""
    # lone surrogates from hostile JSON would make the UTF-8 body unencodable: escape them
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    error: dict[str, Any] = {"code": code, "message": message}
    if request_id:
        error["request_id"] = request_id
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def _request_id(request: Request) -> str | None:
    return getattr(request.state, "request_id", None)


def _validation_message(exc: RequestValidationError, *, json_body: bool = True) -> str:
    """A short, input-free summary: which fields, what is wrong (inputs may be huge or hostile). A body that
    is not JSON, or not a JSON object, is said so once, without FastAPI's character offset as a field."""
    errors = exc.errors()
    parts = []
    for err in errors[:5]:
        parts.append(_one_error(err, json_body=json_body))
        if parts[-1].startswith(_WHOLE_BODY):
            return parts[-1]
    more = len(errors) - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


_WHOLE_BODY = "the request body "


def _one_error(err: Any, *, json_body: bool) -> str:
    """One error as ``field[index].field: what``; the whole body's faults as a sentence."""
    loc = tuple(err.get("loc", ()))
    msg = str(err.get("msg", "invalid"))
    kind = err.get("type")
    if loc[:1] == ("body",):
        loc = loc[1:]
    if kind == "json_invalid":  # FastAPI: loc (body, offset), ctx.error; pydantic: msg "Invalid JSON: ..."
        detail = (err.get("ctx") or {}).get("error") or msg.removeprefix("Invalid JSON: ")
        where = f" (at character {loc[0]})" if loc and isinstance(loc[0], int) else ""
        return f"{_WHOLE_BODY}is not valid JSON: {detail}{where}"
    if not loc:
        if kind == "missing":
            return f"{_WHOLE_BODY}is missing: send a JSON object (Content-Type: application/json)"
        if kind in ("model_attributes_type", "dict_type", "model_type"):
            hint = "" if json_body else " with Content-Type: application/json"
            return f"{_WHOLE_BODY}must be a JSON object{hint}"
        return f"body: {msg}"
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{path}: {msg}"


async def _lnserve_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LnserveError)
    headers: dict[str, str] = {}
    if isinstance(exc, QueueFullError):
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, UnauthorizedError):
        headers["WWW-Authenticate"] = "Bearer"
    status = http_status(exc)
    if status >= 500:
        log.error("%s: %s", exc.code, exc)
    return error_response(status, exc.code, str(exc), request_id=_request_id(request), headers=headers)


def is_json(request: Request) -> bool:
    """FastAPI's own rule for parsing a body as JSON: application/json or application/*+json."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return ctype == "application/json" or (ctype.startswith("application/") and ctype.endswith("+json"))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    status, code = ERROR_TABLE[RequestValidationError]
    message = _validation_message(exc, json_body=is_json(request))
    return error_response(status, code, message, request_id=_request_id(request))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # FastAPI's "error parsing the body" (e.g. not UTF-8): bad input like the rest
        status, code = ERROR_TABLE[RequestValidationError]
        return error_response(
            status, code, f"unreadable request body: {exc.detail}", request_id=_request_id(request)
        )
    code = HTTP_STATUS_CODES.get(exc.status_code, f"http_{exc.status_code}")
    detail = str(exc.detail)
    if exc.status_code == 404 and detail == "Not Found":  # the router's: no route matched
        path = request.url.path
        shown = path if len(path) <= 100 else path[:100] + "..."
        detail = (
            f"no route matches {request.method} {shown}: paths are matched as sent, with no redirects "
            "(an item id with '/' is reached by ?id=)"
        )
    return error_response(
        exc.status_code,
        code,
        detail,
        request_id=_request_id(request),
        headers=dict(exc.headers) if exc.headers else None,
    )


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    rid = _request_id(request)
    log.error("unhandled error (request %s)", rid, exc_info=exc)
    return error_response(500, "internal_error", f"internal error (request id {rid})", request_id=rid)


def install_error_handlers(app: FastAPI) -> None:
    """Register every handler; the 500 one also catches what escapes the routes."""
    app.add_exception_handler(LnserveError, _lnserve_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
