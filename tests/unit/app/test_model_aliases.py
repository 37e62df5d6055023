"""LNSERVE_MODEL_ALIASES: ALIAS=MODEL pairs; a malformed pair, an alias of no model or one that hides a model
is a configuration mistake (invalid_setting, serve exits 2), never a surprise at request time."""

from __future__ import annotations

import asyncio

import pytest

from lnserve.app.serving.registry import ModelRegistry, resolve_model_dirs
from lnserve.app.settings import load_settings
from lnserve.errors import InvalidSettingError


def test_pairs_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", " text-embedding-ada-002 = demo-lngru , x=demo-lngru ")
    assert load_settings().model_aliases == {"text-embedding-ada-002": "demo-lngru", "x": "demo-lngru"}
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", '{"a": "demo-lngru"}')
    assert load_settings().model_aliases == {"a": "demo-lngru"}
    monkeypatch.delenv("LNSERVE_MODEL_ALIASES")
    assert load_settings().model_aliases == {}


@pytest.mark.parametrize("value", ["ada", "=demo-lngru", "ada=", "a=b,c"])
def test_malformed_pairs_are_invalid_settings(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", value)
    with pytest.raises(InvalidSettingError, match=r"LNSERVE_MODEL_ALIASES=.*is not ALIAS=MODEL"):
        load_settings()


@pytest.mark.parametrize(
    "value",
    [
        "..=demo-lngru",
        ".=demo-lngru",
        "a\nb=demo-lngru",
        "a/b=demo-lngru",
        '{"a\\\\b": "demo-lngru"}',
        '{"": "x"}',
    ],
)
def test_an_alias_must_be_a_valid_model_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """Clients send an alias as a model name (``/models/NAME/reload`` too): it obeys the same rule."""
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", value)
    with pytest.raises(
        InvalidSettingError, match=r"^LNSERVE_MODEL_ALIASES=.*: bad alias .*model name"
    ) as err:
        load_settings()
    assert "\n" not in str(err.value)


def test_an_alias_must_name_a_served_model_and_hide_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", "ada=nope")
    with pytest.raises(InvalidSettingError, match="'nope' is not among the models"):
        resolve_model_dirs(load_settings())
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", "demo-lngru=demo-lngru")
    with pytest.raises(InvalidSettingError, match="already a model's name"):
        resolve_model_dirs(load_settings())
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", "ada=demo-lngru")
    assert [name for name, _, _ in resolve_model_dirs(load_settings())] == ["demo-lngru"]


def test_the_default_model_may_be_named_by_an_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    """An alias is a name for its model wherever a model name is taken: ``LNSERVE_DEFAULT_MODEL`` too."""
    monkeypatch.setenv("LNSERVE_MODEL_ALIASES", "ada=demo-lngru")
    monkeypatch.setenv("LNSERVE_DEFAULT_MODEL", "ada")
    settings = load_settings()
    assert [name for name, _, _ in resolve_model_dirs(settings)] == ["demo-lngru"]
    registry = ModelRegistry(settings)
    asyncio.run(registry.open())
    assert registry.default_name == "demo-lngru" and list(registry.entries) == ["demo-lngru"]
