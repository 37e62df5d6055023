"""Replica health (``scale.deployment``): the probe passes on a working model and fails once its session
broke, which makes Serve replace the replica; the start-up wrapper serves only once models are loaded.

A real registry with the demo model (no Ray needed); the break is a real onnxruntime failure: the sentence
session is swapped for the image projection's, which rejects the sentence inputs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lnserve.app.http.main import create_app
from lnserve.app.scale.deployment import _until_loaded, probe_models
from lnserve.app.serving.registry import ModelRegistry
from lnserve.app.settings import Settings


def test_probe_passes_then_fails_when_the_session_breaks(tmp_path: Path) -> None:
    async def main() -> None:
        registry = ModelRegistry(Settings(galleries_dir=tmp_path, threads=1))
        await registry.open()
        await registry.load()
        try:
            await probe_models(registry)  # healthy
            entry = registry.get(None)
            assert entry.engine is not None
            sessions = entry.engine.backend.sessions  # type: ignore[attr-defined]
            part = next(p for p in sessions if p != "image")
            sessions[part] = sessions["image"]
            with pytest.raises(RuntimeError, match="failed its health probe"):
                await probe_models(registry)
        finally:
            await registry.close()

    asyncio.run(main())


def test_startup_waits_until_every_model_is_loaded(tmp_path: Path) -> None:
    async def main() -> None:
        app = create_app(Settings(galleries_dir=tmp_path, threads=1))
        async with _until_loaded(app.router.lifespan_context)(app):
            assert app.state.registry.ready  # no window where a replica answers 503 not_ready

    asyncio.run(main())
