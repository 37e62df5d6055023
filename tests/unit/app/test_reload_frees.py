"""A reloaded model's old version is freed by reference counting alone, once it has retired: with the
garbage collector off, nothing of it (entry, engine, batcher) is left. (The entry and its batcher used to
refer to each other through the batch function, so only a full GC pass freed them.) Its onnxruntime
sessions included."""

from __future__ import annotations

import asyncio
import gc
import weakref

from lnserve.app.serving.registry import ModelRegistry
from lnserve.app.settings import Settings


def test_old_versions_are_freed_without_the_garbage_collector() -> None:
    async def reload_three_times() -> list[weakref.ref[object]]:
        registry = ModelRegistry(Settings(threads=1))
        await registry.open()
        assert not await registry.load()
        name = registry.default_name
        assert name is not None
        gone: list[weakref.ref[object]] = []
        for _ in range(3):
            old = registry.entries[name]
            gone += [weakref.ref(old), weakref.ref(old.engine), weakref.ref(old.batcher)]
            sessions = getattr(old.engine.backend, "sessions", {})  # onnxruntime's, really released
            assert sessions, "the demo model is served by onnxruntime sessions"
            gone += [weakref.ref(s) for s in sessions.values()]
            del sessions
            del old
            await registry.reload(name)
        while registry._retiring:  # every old version drained and closed
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        alive = [r for r in gone if r() is not None]
        await registry.close()
        return alive

    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        alive = asyncio.run(reload_three_times())
    finally:
        if enabled:
            gc.enable()
    assert not alive, f"{len(alive)} objects of retired versions still alive: {[r() for r in alive][:3]}"
