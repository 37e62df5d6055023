"""Settings from LNSERVE_* environment variables; the app factory builds them, imports do not."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from lnserve.app.runtime.engine import DEFAULT_BACKEND
from lnserve.app.settings import Settings, load_settings
from lnserve.errors import InvalidSettingError


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


def test_load_settings_names_the_source_and_what_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LNSERVE_MODELS", "[not json")
    monkeypatch.setenv("LNSERVE_MAX_WAIT_MS", "-1")
    with pytest.raises(InvalidSettingError) as err:
        load_settings({"host": "0.0.0.0", "log_level": "loud"})
    assert err.value.code == "invalid_setting" and err.value.exit_code == 2
    message = str(err.value)
    assert "LNSERVE_MODELS='[not json': models must be a comma-separated list or a JSON list" in message
    assert "LNSERVE_MAX_WAIT_MS='-1': max_wait_ms must be a number >= 0" in message
    assert "--log-level 'loud': log_level must be one of debug, info, warning, error" in message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["MAX_WAIT_MS", "INFLIGHT_WAIT_MS", "REQUEST_TIMEOUT_MS", "DRAIN_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["inf", "Infinity", "-inf"])
def test_an_endless_wait_or_timeout_is_refused(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inf`` passed the >= 0 bounds: ``LNSERVE_MAX_WAIT_MS=inf`` made an idle model hold a lone request
    until a full batch arrived."""
    monkeypatch.setenv(f"LNSERVE_{name}", value)
    with pytest.raises(InvalidSettingError) as err:
        load_settings()
    assert f"LNSERVE_{name}='{value}': {name.lower()} must be a number" in str(err.value)


def test_load_settings_with_good_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LNSERVE_PORT", "9000")
    assert load_settings({"backend": "torch"}).port == 9000
