"""The hot routes answered below FastAPI (``fast_routes``) answer exactly as FastAPI's own path does: the
app in process twice (httpx ASGI transport, real models), once as built and once without ``FastRoutes``,
every hot route sent the same table of bodies (valid, invalid JSON, off the schema, over a limit, an unknown
model, other content types, a large body, a surrogate escape), status, headers and body compared. The
schema is the one taken before the change (``tests/fixtures/openapi.json``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI

from lnserve.app.http.body_parsing import INLINE_PARSE_BYTES
from lnserve.app.http.fast_routes import FastEndpoint, FastRoutes
from lnserve.app.http.main import create_app
from lnserve.app.http.routes import FAST_ROUTES
from lnserve.app.settings import Settings

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
JSON = "application/json"
BIG = ["a dog runs"] * (INLINE_PARSE_BYTES // 12)  # over INLINE_PARSE_BYTES: the parsing worker's
# each route's valid body and what is particular to it; the rest of the table is built from these
VALID = {
    "/encode": {"sentences": ["a dog runs", "two cats"]},
    "/v1/embeddings": {"input": ["a dog runs", "two cats"], "model": "demo-lngru"},
    "/embed": {"inputs": ["a dog runs", "two cats"]},
}
FIELD = {"/encode": "sentences", "/v1/embeddings": "input", "/embed": "inputs"}


def _bodies(path: str) -> list[tuple[str, bytes, str | None]]:
    """(case, body, content type) for ``path``: every way a body can be right or wrong."""
    valid, field = VALID[path], FIELD[path]
    dump = json.dumps

    def with_(**changes: object) -> bytes:
        return dump({**valid, **changes}).encode()

    return [
        ("valid", dump(valid).encode(), JSON),
        ("valid, charset", dump(valid).encode(), "application/json; charset=utf-8"),
        ("valid, one text", with_(**{field: "a dog"}), JSON),
        ("invalid json", b'{"' + field.encode() + b'": [', JSON),
        ("empty body", b"", JSON),
        ("not an object", b"[1, 2]", JSON),
        ("wrong type", with_(**{field: 5}), JSON),
        ("extra field", with_(surprise=1), JSON),
        ("empty list", with_(**{field: []}), JSON),
        ("token ids", with_(**{field: [[1, 2]]}), JSON),
        ("unknown model", with_(model="no-such-model"), JSON),
        ("too many texts", with_(**{field: ["a"] * 5000}), JSON),
        ("large", with_(**{field: BIG}), JSON),
        ("surrogate", dump(valid).replace("a dog", "\\ud800").encode(), JSON),
        ("not utf-8", dump(valid).encode().replace(b"a dog", b"a \xff dog"), JSON),
        ("text/plain", dump(valid).encode(), "text/plain"),
        ("no content type", dump(valid).encode(), None),
        ("duplicate keys", dump(valid).encode()[:-1] + b", " + dump(valid).encode()[1:], JSON),
    ]


CASES = [(path, *case) for path in sorted(FAST_ROUTES) for case in _bodies(path)]


def _without_fast_routes(app: FastAPI) -> FastAPI:
    """The same app answering every request through FastAPI (the middleware stack is built on first use)."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not FastRoutes]
    return app


@asynccontextmanager
async def _served(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        transport = httpx.ASGITransport(app=app)
        client = await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://t"))
        deadline = time.monotonic() + 120  # a deadline, not a count: a busy machine loads slowly
        while (await client.get("/ready")).status_code != 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        yield client


def _settings(tmp: Path) -> Settings:
    return Settings(galleries_dir=tmp, max_sentences=1000, access_log=False)


async def _answer(client: httpx.AsyncClient, path: str, body: bytes, ctype: str | None) -> tuple[object, ...]:
    headers = {"X-Request-ID": "same-id"} | ({"Content-Type": ctype} if ctype else {})
    r = await client.post(path, content=body, headers=headers)
    timing = sorted(k for k in r.headers if k.startswith("x-"))  # their values are times
    kept = {k: v for k, v in r.headers.items() if not k.startswith(("x-queue", "x-inference"))}
    return r.status_code, kept, timing, r.content


def test_fast_routes_answer_as_fastapi_does(tmp_path: Path) -> None:
    async def main() -> list[tuple[str, str, tuple[object, ...], tuple[object, ...]]]:
        differ = []
        async with (
            _served(create_app(_settings(tmp_path / "a"))) as fast,
            _served(_without_fast_routes(create_app(_settings(tmp_path / "b")))) as slow,
        ):
            for path, case, body, ctype in CASES:
                a, b = await _answer(fast, path, body, ctype), await _answer(slow, path, body, ctype)
                if a != b:
                    differ.append((path, case, a, b))
            return differ

    differ = asyncio.run(main())
    assert not differ, "\n".join(f"{p} {c}:\n  fast {a}\n  fastapi {b}" for p, c, a, b in differ)


def test_every_hot_route_is_fast_for_valid_small_json(tmp_path: Path) -> None:
    """The table's valid small JSON bodies are the fast path's; what FastAPI must parse or refuse goes on to
    it (whether an extra field or an empty list is valid is each model's rule: not asserted here)."""
    app = create_app(_settings(tmp_path))
    (fast,) = [m for m in app.user_middleware if m.cls is FastRoutes]
    endpoints = {r.path: FastEndpoint(r) for r in fast.kwargs["routes"]}
    assert set(endpoints) == FAST_ROUTES
    taken = {"valid", "valid, charset", "unknown model", "duplicate keys"}
    taken |= {"too many texts"}  # well-formed: the count is the serving layer's check (small bodies)
    passed = {"invalid json", "empty body", "not an object", "wrong type", "large", "surrogate", "not utf-8"}
    passed |= {"text/plain", "no content type"}
    for path, case, body, ctype in CASES:
        headers = [(b"content-type", ctype.encode())] if ctype else []
        parsed = endpoints[path].parse({"headers": headers}, body)
        if case in taken | passed:
            assert (parsed is not None) == (case in taken), (path, case)


def test_schema_is_unchanged(tmp_path: Path) -> None:
    """``/openapi.json`` as served, key order included, is the schema of before (whitespace aside)."""

    async def main() -> bytes:
        async with _served(create_app(_settings(tmp_path))) as client:
            r = await client.get("/openapi.json")
            assert r.status_code == 200
            return r.content

    served = json.dumps(json.loads(asyncio.run(main())))
    assert served == json.dumps(json.loads((FIXTURES / "openapi.json").read_text(encoding="utf-8")))
