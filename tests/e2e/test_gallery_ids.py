"""Every id and name that ends up in a URL path, against a real server: an item id, a gallery name or a model
name is either refused where it is made, or addressable as one percent-encoded path segment, reaching exactly
what it names. ``DELETE /galleries/shop/items/..`` used to delete the whole gallery (clients resolve the dot
segment to ``DELETE /galleries/shop``); ``a/b`` was accepted and could never be fetched or deleted.
Items stored before the rule with such ids stay reachable by ``?id=``."""

from __future__ import annotations

import sqlite3
import string
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.runtime.engine import Engine
from lnserve.converters.url_segment import segment_fault
from tests.conftest import LEGACY
from tests.e2e.server import LiveServer, start_server
from tests.support.hostile_strings import HOSTILE

MODEL = "oe_order_gru"
IMAGE = np.load(LEGACY / "order_embedding" / "images.npy")[0].tolist()

LEGACY_IDS = ["..", ".", "a/b", "/", "\\", "line\nbreak"]  # stored before the rule: reached by ?id=


def _path(s: str) -> str:
    return quote(s, safe="")


def _error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.json()["error"]["code"] == code, r.text


@pytest.fixture(scope="module")
def server(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    tmp = tmp_path_factory.mktemp("ids")
    engine = Engine.open(artifacts[MODEL], backend="torch")
    store = GalleryStore(tmp / "galleries", scorer="numpy")
    store.create("legacy", kind="images", model=ModelRef.from_artifact(engine.artifact))
    vecs = engine.encode_images(np.asarray([IMAGE] * len(LEGACY_IDS), dtype=np.float32))
    store.add("legacy", vecs, ids=[f"tmp{i}" for i in range(len(LEGACY_IDS))])
    db = sqlite3.connect(tmp / "galleries" / "legacy" / "gallery.sqlite")  # as an older lnserve stored them
    with db:
        for i, legacy in enumerate(LEGACY_IDS):
            db.execute("UPDATE items SET id = ? WHERE id = ?", (legacy, f"tmp{i}"))
    db.close()
    live = start_server(tmp, "--models", str(artifacts[MODEL]), env={"LNSERVE_SCORER": "numpy"})
    yield live
    live.stop()


def _create(c: httpx.Client, name: str) -> None:
    r = c.post("/galleries", json={"name": name, "kind": "images", "model": MODEL})
    assert r.status_code == 201, r.text


def _add(c: httpx.Client, gallery: str, item_id: str) -> httpx.Response:
    return c.post(f"/galleries/{gallery}/items", json={"items": [{"image": IMAGE, "id": item_id}]})


def test_dot_segment_and_separator_ids_are_refused_on_add(server: LiveServer) -> None:
    """``..`` as an item id made ``DELETE /galleries/shop/items/..`` a request for the gallery itself (the
    client resolves the dot segment): such an id can no longer be added, before anything is encoded."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        _create(c, "shop")
        assert _add(c, "shop", "keep").status_code == 200
        for bad in (".", "..", "/", "a/b", "a\\b", "\x00", "line\nbreak", "\x7f"):
            r = _add(c, "shop", bad)
            _error(r, 422, "invalid_item_id")
            assert (
                repr(bad)[1:-1] in r.json()["error"]["message"] or "control" in r.json()["error"]["message"]
            )
        items = [{"image": IMAGE, "id": "fine"}, {"image": IMAGE, "id": ".."}]  # all or nothing
        _error(c.post("/galleries/shop/items", json={"items": items}), 422, "invalid_item_id")
        assert c.get("/galleries/shop").json()["count"] == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    item_id=st.one_of(
        st.sampled_from(HOSTILE),
        st.text(alphabet=st.sampled_from([*"./\\%?#&=+ ~", "\x00", "\n", "\x7f", "é", *string.ascii_letters]),
                min_size=1, max_size=12),
        st.text(min_size=1, max_size=40),
    )
)  # fmt: skip
def test_an_item_id_is_refused_on_add_or_reaches_exactly_its_item(server: LiveServer, item_id: str) -> None:
    """Property: an add either refuses the id (422 invalid_item_id; invalid_request when empty or over 256
    characters, by the schema) or the id, percent-encoded as one path segment, fetches and deletes exactly
    that item and nothing else; the gallery and its other items survive."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        if c.get("/galleries/prop").status_code == 404:
            assert (
                c.post("/galleries", json={"name": "prop", "kind": "images", "model": MODEL}).status_code
                == 201
            )
            assert _add(c, "prop", "anchor").status_code == 200
        before = c.get("/galleries/prop").json()["count"]
        r = _add(c, "prop", item_id)
        if not 1 <= len(item_id) <= 256:
            _error(r, 422, "invalid_request")
        elif segment_fault(item_id) is not None:
            _error(r, 422, "invalid_item_id")
        elif r.status_code == 409:  # drawn twice
            _error(r, 409, "duplicate_item")
        else:
            assert r.status_code == 200, r.text
            got = c.get(f"/galleries/prop/items/{_path(item_id)}")
            assert got.status_code == 200 and got.json()["id"] == item_id, got.text
            by_query = c.get("/galleries/prop/items", params={"id": item_id})
            assert by_query.status_code == 200 and by_query.json()["id"] == item_id
            assert c.delete(f"/galleries/prop/items/{_path(item_id)}").status_code == 204
            _error(c.get("/galleries/prop/items", params={"id": item_id}), 404, "item_not_found")
        assert c.get("/galleries/prop").json()["count"] == before
        assert c.get("/galleries/prop/items/anchor").status_code == 200


def test_hostile_item_ids_in_urls_never_reach_anything_else(server: LiveServer) -> None:
    """Every hostile string as a path segment or a query value: a 4xx or exactly the item, never a 5xx,
    never the gallery itself."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        _create(c, "probe")
        assert _add(c, "probe", "anchor").status_code == 200
        for s in HOSTILE:
            urls = [f"/galleries/probe/items?id={_path(s)}"]
            if s not in (".", ".."):  # as a path segment these name the gallery (or its item list) by design
                urls.append(f"/galleries/probe/items/{_path(s)}")
            for url in urls:
                for method in ("GET", "DELETE"):
                    r = c.request(method, url)
                    assert r.status_code in (404, 422), (s, url, r.status_code, r.text)  # never a redirect
                    if r.status_code == 404:  # not_found: a decoded '/' splits the segment, no route matches
                        assert r.json()["error"]["code"] in ("item_not_found", "not_found"), (s, url, r.text)
        for raw in ("%ED%A0%80", "%FF", "%C0%AE%C0%AE", "%00"):  # not UTF-8 / an encoded surrogate / NUL
            for url in (f"/galleries/probe/items/{raw}", f"/galleries/probe/items?id={raw}"):
                for method in ("GET", "DELETE"):
                    _error(c.request(method, url), 404, "item_not_found")
        assert c.get("/galleries/probe").json()["count"] == 1
        assert c.get("/galleries/probe/items/anchor").status_code == 200


def test_legacy_ids_stay_reachable_by_query(server: LiveServer) -> None:
    """Items stored (by an older lnserve) under ids no path can address are fetched and deleted by ?id=,
    one at a time; the gallery keeps the rest."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for i, legacy in enumerate(LEGACY_IDS):
            r = c.get("/galleries/legacy/items", params={"id": legacy})
            assert r.status_code == 200 and r.json()["id"] == legacy, (legacy, r.text)
            assert c.delete("/galleries/legacy/items", params={"id": legacy}).status_code == 204
            _error(c.get("/galleries/legacy/items", params={"id": legacy}), 404, "item_not_found")
            assert c.get("/galleries/legacy").json()["count"] == len(LEGACY_IDS) - i - 1
        _error(c.get("/galleries/legacy/items"), 422, "invalid_request")  # ?id= is required


def test_hostile_gallery_names_are_refused_or_addressable(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for s in [*HOSTILE, "ok.name_1-2", "A"]:
            r = c.post("/galleries", json={"name": s, "kind": "images", "model": MODEL})
            if r.status_code == 201:
                assert c.get(f"/galleries/{_path(s)}").json()["name"] == s
                assert c.delete(f"/galleries/{_path(s)}").status_code == 204
            else:
                _error(r, 422, "invalid_request")
                if s in ("", ".", "..", "/"):
                    continue  # as a path these are /galleries/ or the root: not a gallery by design
                for method in ("GET", "DELETE"):
                    r = c.request(method, f"/galleries/{_path(s)}")
                    assert r.status_code in (404, 422), (s, r.status_code, r.text)
        r = c.get("/galleries")
        assert r.status_code == 200 and "legacy" in {g["name"] for g in r.json()["galleries"]}
