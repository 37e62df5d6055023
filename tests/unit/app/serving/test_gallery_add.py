"""``serving.galleries.add_items``: one call per add, over HTTP (in-process app, real model and store) and
in the store: the gallery is read once to pick its model and opened once more, under the writers' lock, to
write; the live count comes back with the ids instead of a third read."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.http.main import create_app
from lnserve.app.settings import Settings
from tests.support.gallery_opens import count_gallery_opens


def test_an_http_add_reads_the_gallery_twice_and_answers_its_count(
    artifacts: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = count_gallery_opens(monkeypatch)
    bodies: list[Any] = []

    async def main() -> None:
        app = create_app(Settings(models=[artifacts["oe_order_gru"]], galleries_dir=tmp_path, scorer="numpy"))
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t") as c,
            app.router.lifespan_context(app),
        ):
            deadline = time.monotonic() + 120  # a deadline, not a count: a busy machine loads slowly
            while (await c.get("/ready")).status_code != 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            made = await c.post("/galleries", json={"name": "g", "kind": "captions"})
            assert made.status_code == 201, made.text
            for items in (
                [{"id": "a", "text": "a dog"}, {"id": "b", "text": "a cat", "payload": None}],
                [{"text": "a bird", "payload": {"n": 3}}],
            ):
                opens.clear()
                r = await c.post("/galleries/g/items", json={"items": items})
                assert r.status_code == 200, r.text
                bodies.append((r.json(), list(opens)))
            bodies.append([(await c.get(f"/galleries/g/items/{i}")).json() for i in ("a", "b")])

    asyncio.run(main())
    (first, first_opens), (second, second_opens), stored = bodies
    assert first_opens == ["g", "g"] and second_opens == ["g", "g"]  # was 4: get, get, open, get (count)
    assert first["ids"] == ["a", "b"] and first["count"] == 2 and second["count"] == 3
    assert len(second["ids"]) == 1 and second["ids"][0] not in ("a", "b")
    assert stored == [{"id": "a", "payload": {"text": "a dog"}}, {"id": "b", "payload": None}]


def test_a_store_add_opens_the_gallery_once_and_tells_its_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GalleryStore(tmp_path / "galleries", scorer="numpy")
    ref = ModelRef(name="toy", identity="a" * 64, family="order-embedding", method="order", dim=8)
    store.create("g", kind="images", model=ref)
    vecs = np.abs(np.random.default_rng(1).standard_normal((6, 8))).astype(np.float32)
    store.add("g", vecs[:3], ids=["0", "1", "2"])
    store.delete_item("g", "1")
    opens = count_gallery_opens(monkeypatch)
    added = store.add("g", vecs[3:], ids=["3", "4", "5"], payloads=[None, {"x": 1}, "s"], model=ref)
    assert opens == ["g"]
    assert added.ids == ["3", "4", "5"] and added.count == 5 == store.get("g").count
    assert store.add("g", vecs[:0], ids=[], model=ref).count == 5  # nothing to add: nothing written
