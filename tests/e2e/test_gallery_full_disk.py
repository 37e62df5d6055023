"""A real full disk under a real server: the galleries live on a small tmpfs (mounted in the server's own user
and mount namespaces), filled to the last byte. Every gallery route answers 507 ``storage_full`` or its
normal answer, never a 500 (deleting an item was a 500, ``database or disk is full`` at its COMMIT; SQLite
opening a database it cannot size the WAL index of was a 500 ``disk I/O error``) and never a false
``gallery_corrupt``; once there is room again, every acknowledged item is there and writes work.

The file-size limit (RLIMIT_FSIZE) that the CLI's full-disk tests use cannot stand in here: SQLite reports
EFBIG as a plain I/O error, while a full disk is SQLITE_FULL, the case the service must answer."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import LEGACY
from tests.e2e.server import LiveServer, start_server

MODEL = "oe_order_gru"
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")
TMPFS = "mount -t tmpfs -o size=4m tmpfs \"$0\" && exec \"$@\""  # fmt: skip


def _namespaces_available(probe: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe.mkdir()
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", TMPFS, str(probe), "true"], capture_output=True)
    return proc.returncode == 0


@pytest.fixture
def server(artifacts: dict[str, Path], tmp_path: Path) -> Iterator[LiveServer]:
    if not _namespaces_available(tmp_path / "probe"):
        pytest.skip("needs unprivileged user and mount namespaces (unshare -rm) to mount a small tmpfs")
    galleries = tmp_path / "galleries"
    galleries.mkdir()
    live = start_server(
        tmp_path,
        "--models",
        str(artifacts[MODEL]),
        env={"LNSERVE_SCORER": "numpy"},
        prefix=["unshare", "-rm", "sh", "-c", TMPFS, str(galleries)],
    )
    yield live
    live.stop()


def _fill(directory: str) -> Path:
    """Fill the file system holding ``directory`` to the last byte; returns the filler file."""
    filler = Path(directory) / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        chunk = b"\0" * (64 << 10)
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    st = os.statvfs(directory)
    assert st.f_bavail == 0, st
    return filler


def _expect(r: httpx.Response, *ok: int) -> None:
    """Its normal answer (``ok``) or 507 storage_full; never a 5xx, never gallery_corrupt."""
    if r.status_code in ok:
        return
    assert r.status_code == 507, (r.request.method, r.request.url, r.status_code, r.text)
    assert r.json()["error"]["code"] == "storage_full", r.text


def test_every_gallery_route_on_a_full_disk(server: LiveServer, tmp_path: Path) -> None:
    items = [{"image": row.tolist(), "id": f"i{j}"} for j, row in enumerate(IMAGES)]
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for name in ("g", "spare"):
            r = c.post("/galleries", json={"name": name, "kind": "images", "model": MODEL})
            assert r.status_code == 201, r.text
        assert c.post("/galleries/g/items", json={"items": items}).status_code == 200
        # the test sees the server's tmpfs through the server's own root
        filler = _fill(f"/proc/{server.proc.pid}/root{tmp_path / 'galleries'}")

        for delete in ("/galleries/g/items/i0", "/galleries/g/items?id=i1"):
            r = c.delete(delete)
            assert r.status_code == 507 and r.json()["error"]["code"] == "storage_full", r.text
            assert "gallery 'g'" in r.json()["error"]["message"]
        r = c.post("/galleries/g/items", json={"items": [{"image": IMAGES[0].tolist(), "id": "new"}]})
        assert r.status_code == 507 and r.json()["error"]["code"] == "storage_full", r.text
        _expect(c.post("/galleries", json={"name": "h", "kind": "images", "model": MODEL}), 201)
        # reads answer as usual (test_no_read_route_fails_on_a_full_disk goes over every GET route)
        assert c.get("/galleries/g").status_code == 200
        assert c.get("/galleries/g/items/i2").status_code == 200
        r = c.post("/retrieve", json={"gallery": "g", "query": {"text": "a dog"}, "k": 2})
        assert r.status_code == 200, r.text
        for listing in ("/galleries", "/info"):
            r = c.get(listing)
            assert r.status_code == 200, r.text
            assert all(g["state"] == "ok" for g in r.json()["galleries"]), r.text
        _expect(c.delete("/galleries/spare"), 204)  # a removal frees space: it needs none
        assert c.get("/health").status_code == 200

        filler.unlink()  # room again: nothing acknowledged was lost, and every write works
        assert c.get("/galleries/g").json()["count"] == len(IMAGES)
        assert c.delete("/galleries/g/items/i0").status_code == 204
        assert c.delete("/galleries/g/items", params={"id": "i1"}).status_code == 204
        r = c.post("/galleries/g/items", json={"items": [{"image": IMAGES[0].tolist(), "id": "new"}]})
        assert r.status_code == 200 and r.json()["count"] == len(IMAGES) - 1, r.text
        assert c.get("/galleries/g/items/i2").json()["id"] == "i2"
        assert c.delete("/galleries/g").status_code == 204
    log = server.log()
    assert "Traceback" not in log and "internal_error" not in log, log[-3000:]


# a value for each path and query parameter of the GET routes: the gallery and item made below, the model
_PARAMS = {"name": "g", "item_id": "i2", "id": "i2", "model_id": MODEL}
_NOT_IN_SCHEMA = ["/", "/openapi.json", "/docs"]  # the front page and the API's own pages


def test_no_read_route_fails_on_a_full_disk(server: LiveServer, tmp_path: Path) -> None:
    """The class: every GET route (walked from the OpenAPI schema, plus the pages outside it) answers as usual
    on a full disk. A read must not fail because a write is impossible: /galleries, /info and / answered 507
    ("the write was abandoned") when no connection was open and SQLite could not make the WAL index."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for name in ("g", "other"):
            r = c.post("/galleries", json={"name": name, "kind": "images", "model": MODEL})
            assert r.status_code == 201, r.text
        items = [{"image": row.tolist(), "id": f"i{j}"} for j, row in enumerate(IMAGES)]
        assert c.post("/galleries/g/items", json={"items": items}).status_code == 200
        spec = c.get("/openapi.json").json()
        routes = list(_NOT_IN_SCHEMA)
        for path, ops in spec["paths"].items():
            if "get" in ops:
                params = ops["get"].get("parameters", [])
                url = path
                query = [f"{p['name']}={_PARAMS[p['name']]}" for p in params if p["in"] == "query"]
                for p in params:
                    url = url.replace("{" + p["name"] + "}", _PARAMS[p["name"]])
                routes.append(url + ("?" + "&".join(query) if query else ""))
        assert {"/galleries", "/info", "/galleries/g", "/galleries/g/items/i2"} <= set(routes)
        before = {route: c.get(route) for route in routes}
        for route, r in before.items():
            assert r.status_code == 200, (route, r.status_code, r.text)

        filler = _fill(f"/proc/{server.proc.pid}/root{tmp_path / 'galleries'}")
        for _ in range(2):  # the first read of each gallery on the full disk, and the ones after it
            for route in routes:
                r = c.get(route)
                assert r.status_code == 200, (route, r.status_code, r.text)
                if route in ("/galleries", "/info"):
                    assert [g["count"] for g in r.json()["galleries"]] == [len(IMAGES), 0], r.text
        r = c.post("/retrieve", json={"gallery": "g", "query": {"text": "a dog"}, "k": 2})
        assert r.status_code == 200 and len(r.json()["results"]) == 2, r.text
        filler.unlink()
        assert c.post("/galleries/other/items", json={"items": items[:2]}).status_code == 200
    log = server.log()
    assert "Traceback" not in log and "internal_error" not in log, log[-3000:]
