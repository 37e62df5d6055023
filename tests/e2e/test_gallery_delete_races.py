"""Deleting a gallery while others use it, against a real server: every gallery route, from several clients
at once, during repeated deletes. A request that loses the race answers 404 ``gallery_not_found`` (or
``item_not_found``), never a 5xx (it was a 500 "disk I/O error" from SQLite opening the WAL of a renamed
database) and never a false 503 ``gallery_corrupt`` ("write.lock is missing", "vectors.f32 is missing")."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

from tests.conftest import LEGACY
from tests.e2e.server import start_server

MODEL = "oe_order_gru"
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")
ROUNDS, CLIENTS = 12, 6
# (status, code) a request may get while its gallery comes and goes; anything else fails the test
ALLOWED = {
    (200, None), (201, None), (204, None),
    (404, "gallery_not_found"), (404, "item_not_found"),
    (409, "gallery_exists"), (409, "duplicate_item"),
}  # fmt: skip


def _requests(i: int, n: int) -> list[tuple[str, str, dict | None]]:
    """One pass over every gallery route (``i``: this client, ``n``: its pass), as (method, url, json)."""
    item = {"items": [{"image": IMAGES[n % len(IMAGES)].tolist(), "id": f"c{i}-{n}"}]}
    return [
        ("GET", "/galleries/g", None),
        ("GET", "/galleries", None),
        ("GET", "/info", None),
        ("POST", "/galleries/g/items", item),
        ("GET", "/galleries/g/items/i0", None),
        ("GET", "/galleries/g/items?id=i1", None),
        ("POST", "/retrieve", {"gallery": "g", "query": {"text": "a dog"}, "k": 3}),
        ("DELETE", f"/galleries/g/items/c{i}-{n}", None),
        ("DELETE", f"/galleries/g/items?id=i{3 + i}", None),
        ("POST", "/galleries", {"name": "g", "kind": "images", "model": MODEL}),
        ("DELETE", "/galleries/g", None),
    ]


def test_every_gallery_route_during_deletes_never_fails(artifacts: dict[str, Path], tmp_path: Path) -> None:
    server = start_server(
        tmp_path,
        "--models",
        str(artifacts[MODEL]),
        env={"LNSERVE_SCORER": "numpy", "LNSERVE_MAX_INFLIGHT": "256", "LNSERVE_MAX_QUEUE": "4096"},
    )
    seen: Counter[tuple[int, str | None]] = Counter()
    bad: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(i: int) -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=60) as c:
                n = 0
                while not stop.is_set():
                    for method, url, body in _requests(i, n):
                        r = c.request(method, url, json=body)
                        code = r.json()["error"]["code"] if r.status_code >= 400 else None
                        listing = r.status_code == 200 and url in ("/galleries", "/info")
                        listed = r.json()["galleries"] if listing else []
                        with lock:
                            seen[(r.status_code, code)] += 1
                            if (r.status_code, code) not in ALLOWED:
                                bad.append(f"{method} {url}: {r.status_code} {r.text[:300]}")
                            bad.extend(f"{url} lists {g}" for g in listed if g.get("state") != "ok")
                    n += 1
        except Exception as exc:  # a client that dies fails the test too
            with lock:
                bad.append(f"client {i}: {exc!r}")

    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            try:
                for _ in range(ROUNDS):
                    c.post("/galleries", json={"name": "g", "kind": "images", "model": MODEL})
                    items = [{"image": row.tolist(), "id": f"i{j}"} for j, row in enumerate(IMAGES)]
                    c.post("/galleries/g/items", json={"items": items})
                    time.sleep(0.2)
                    r = c.delete("/galleries/g")
                    assert r.status_code in (204, 404), r.text
            finally:
                stop.set()
                for t in threads:
                    t.join(120)
            assert not bad, "\n".join(bad[:20])
            assert seen[(204, None)] > 0 and seen[(404, "gallery_not_found")] > 0, seen  # the races happened
            assert "Traceback" not in server.log() and "internal_error" not in server.log()
            assert c.get("/health").status_code == 200
    finally:
        server.stop()
