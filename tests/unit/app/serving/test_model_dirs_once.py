"""``lnserve serve`` reads the model directories once: the registry opens on the models its caller resolved
(before binding the port) and never walks the configured paths again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lnserve.app.serving.registry import ModelRegistry, resolve_model_dirs
from lnserve.app.settings import Settings
from lnserve.errors import InvalidSettingError


def test_the_registry_opens_on_the_models_it_is_given(tmp_path: Path) -> None:
    given = resolve_model_dirs(Settings(threads=1))  # the demo model
    gone = Settings(models=[tmp_path / "removed-since"], threads=1)
    with pytest.raises(InvalidSettingError):
        resolve_model_dirs(gone)  # resolving these settings again would fail

    async def open_names() -> list[str]:
        registry = ModelRegistry(gone, model_dirs=given)
        await registry.open()
        try:
            return sorted(registry.entries)
        finally:
            await registry.close()

    assert asyncio.run(open_names()) == [name for name, _, _ in given]


def test_without_them_the_registry_resolves_itself(tmp_path: Path) -> None:
    async def open_missing() -> None:
        registry = ModelRegistry(Settings(models=[tmp_path / "missing"], threads=1))
        try:
            await registry.open()
        finally:
            await registry.close()

    with pytest.raises(InvalidSettingError):
        asyncio.run(open_missing())
