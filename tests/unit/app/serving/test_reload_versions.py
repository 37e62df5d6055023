"""Two versions of a model at most (issue 30, finding 9), on a real registry with the demo model: a reload's
old version serves the requests that looked it up before the switch and is closed and freed the moment the
last of them ends, not after a fixed grace; a reload that comes while an old version is still retiring waits
for it instead of loading a third version beside the two."""

from __future__ import annotations

import asyncio

import numpy as np

from lnserve.app.serving.registry import ModelRegistry
from lnserve.app.settings import Settings

SENTENCE = "a red circle on the left"


def test_an_old_version_goes_with_its_last_request_and_a_reload_waits_for_it() -> None:
    async def main() -> None:
        registry = ModelRegistry(Settings(threads=1))
        await registry.open()
        assert not await registry.load()
        name = registry.default_name
        assert name is not None
        go_on = asyncio.Event()

        async def request() -> np.ndarray:
            """A request that looked the model up before the reload and encodes after it."""
            entry = registry.get(name)
            await go_on.wait()
            seqs = entry.token_ids([SENTENCE], pretokenized=False, eos=None, truncate=True)
            return await entry.encode_ids(seqs, normalize=None)

        held = asyncio.create_task(request())
        await asyncio.sleep(0)  # it has looked the model up
        old = registry.entries[name]
        try:
            await registry.reload(name)
            second = asyncio.create_task(registry.reload(name))
            await asyncio.sleep(1.0)
            assert old.engine is not None, "the old version was released under a request that holds it"
            assert not second.done(), "a second reload loaded a third version beside the two"
            go_on.set()
            assert (await asyncio.wait_for(held, 60)).shape == (1, 64)  # served by the old version
            await asyncio.wait_for(second, 60)
            assert old.engine is None, "the old version outlived its last request"
            assert list(registry.entries) == [name]
        finally:
            go_on.set()
            await registry.close()

    asyncio.run(main())


def test_a_version_nobody_holds_is_released_at_once() -> None:
    async def main() -> None:
        registry = ModelRegistry(Settings(threads=1))
        await registry.open()
        assert not await registry.load()
        name = registry.default_name
        assert name is not None
        old = registry.entries[name]
        try:
            await registry.reload(name)
            await asyncio.wait_for(_retired(registry), 3.0)  # the old grace was 5 s
            assert old.engine is None
        finally:
            await registry.close()

    asyncio.run(main())


async def _retired(registry: ModelRegistry) -> None:
    while registry._retiring:
        await asyncio.sleep(0.01)
