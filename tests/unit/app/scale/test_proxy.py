"""The proxy middleware: a 5xx that no lnserve replica produced (or no answer at all) becomes the service's
503 ``replica_unavailable``; every answer from a replica passes untouched."""

from __future__ import annotations

import asyncio
import json

from starlette.types import Message, Receive, Scope, Send

from lnserve.app.scale.proxy import EngineErrors

SCOPE = {"type": "http", "method": "POST", "path": "/encode", "headers": [(b"x-request-id", b"rid-1")]}


def _run(inner) -> list[Message]:  # type: ignore[no-untyped-def]
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(EngineErrors(inner)(dict(SCOPE), receive, send))
    return sent


def _answer(status: int, headers: list[tuple[bytes, bytes]], body: bytes):  # type: ignore[no-untyped-def]
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


def _unavailable(sent: list[Message]) -> None:
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 503
    headers = dict(sent[0]["headers"])
    assert headers[b"retry-after"] == b"1" and headers[b"content-type"] == b"application/json"
    error = json.loads(sent[1]["body"])["error"]
    assert error["code"] == "replica_unavailable" and error["request_id"] == "rid-1" and error["message"]


def test_no_answer_from_the_proxy_becomes_503() -> None:
    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        return None

    _unavailable(_run(silent))


def test_engine_500_and_exceptions_become_503() -> None:
    _unavailable(_run(_answer(500, [(b"content-type", b"text/plain")], b"Internal Server Error")))

    async def raising(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("actor died")

    _unavailable(_run(raising))


def test_answers_from_a_replica_pass_untouched() -> None:
    ours = [(b"x-lnserve-replica", b"abc"), (b"content-type", b"application/json")]
    for status in (200, 422, 500, 503):
        sent = _run(_answer(status, ours, b'{"error": {}}'))
        assert sent[0]["status"] == status and sent[1]["body"] == b'{"error": {}}'
    sent = _run(_answer(404, [], b"Path not found"))  # the engine's own 4xx: not an outage
    assert sent[0]["status"] == 404


def test_one_request_id_the_replicas() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"x-request-id", b"ours"), (b"x-lnserve-replica", b"r"), (b"X-Request-ID", b"proxy")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    headers = _run(app)[0]["headers"]
    assert [v for k, v in headers if k.lower() == b"x-request-id"] == [b"ours"]
