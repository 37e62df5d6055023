"""Settings from LNSERVE_* environment variables; the app factory builds them, imports do not."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from lnserve.app.runtime.engine import DEFAULT_BACKEND
from lnserve.app.settings import Settings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LNSERVE_MODELS", "LNSERVE_API_KEY", "LNSERVE_BACKEND", "LNSERVE_HOST", "LNSERVE_PORT"):
        monkeypatch.delenv(name, raising=False)
    s = Settings()
    assert s.models == [] and s.api_key is None and s.backend == DEFAULT_BACKEND
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    assert set(s.limits()) >= {"max_sentences", "max_tokens", "max_body_bytes", "max_queue"}


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LNSERVE_MODELS", "/m/a, /m/b")
    monkeypatch.setenv("LNSERVE_CORS_ORIGINS", '["https://x.example"]')
    monkeypatch.setenv("LNSERVE_MAX_QUEUE", "7")
    monkeypatch.setenv("LNSERVE_API_KEY", "sekrit")
    monkeypatch.setenv("LNSERVE_DEFAULT_MODEL", "")
    s = Settings()
    assert s.models == [Path("/m/a"), Path("/m/b")] and s.cors_origins == ["https://x.example"]
    assert s.max_queue == 7 and s.default_model is None
    assert s.api_key is not None and s.api_key.get_secret_value() == "sekrit" and "sekrit" not in repr(s)


def test_empty_api_key_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LNSERVE_API_KEY", "")
    assert Settings().api_key is None


def test_invalid_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(backend="tensorflow")
    with pytest.raises(ValidationError):
        Settings(max_queue=0)
