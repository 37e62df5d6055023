"""What each request costs the event loop: no thread hop for dependencies, no OpenTelemetry lookups nobody
asked for, and the in-flight count the batchers read (``inflight_wait_ms``)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from lnserve.app.http import deps
from lnserve.app.http.main import create_app, telemetry_config
from lnserve.app.settings import Settings


def test_request_dependencies_are_async_so_fastapi_runs_them_on_the_loop() -> None:
    # a plain ``def`` dependency runs in FastAPI's thread pool: two hops per /encode request
    for dep in (deps.get_registry, deps.get_settings, deps.get_galleries, deps.require_api_key):
        assert inspect.iscoroutinefunction(dep), dep.__name__


def test_fastapi_telemetry_is_off_unless_the_environment_names_a_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER", "OTEL_PYTHON_LOGGER_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    app = create_app(Settings(galleries_dir=tmp_path))
    assert app._telemetry["tracing"] is False  # type: ignore[attr-defined]
    assert app._telemetry["metrics"] is False and app._telemetry["logs"] is False  # type: ignore[attr-defined]
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider")
    assert telemetry_config() is None  # FastAPI's defaults: its native telemetry on


def test_the_batchers_read_the_middlewares_in_flight_count(tmp_path: Path) -> None:
    app = create_app(Settings(galleries_dir=tmp_path))
    assert app.state.registry.in_flight() == 0
    app.state.lifecycle.inflight = 3
    assert app.state.registry.in_flight() == 3


def test_the_api_key_declaration_is_in_the_schema_but_not_solved_per_request(tmp_path: Path) -> None:
    # require_api_key only declares the bearer scheme (the middleware checks the key): FastAPI would solve
    # it and the scheme under it on every request for nothing
    from fastapi.testclient import TestClient

    app = create_app(Settings(galleries_dir=tmp_path))
    schema = app.openapi()
    assert schema["paths"]["/encode"]["post"]["security"] == [{"HTTPBearer": []}]
    assert "HTTPBearer" in schema["components"]["securitySchemes"]

    def solved() -> None:
        raise AssertionError("require_api_key was solved for a request")

    app.dependency_overrides[deps.require_api_key] = solved
    client = TestClient(app)  # no lifespan: the request fails validation before it needs a model
    r = client.post("/encode", json={"sentences": []})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
