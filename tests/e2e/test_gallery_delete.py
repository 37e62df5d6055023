"""Whole-gallery delete: ``DELETE /galleries/NAME`` over a real server, the same store path as ``lnserve
gallery rm``, and crash safety: a process killed with SIGKILL half-way through a removal leaves either the
gallery or nothing (a hidden ``.NAME.removed-*`` leftover that the next start deletes), never half of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.runtime.engine import Engine
from tests.conftest import LEGACY, run_cli
from tests.e2e.server import start_server

MODEL = "oe_order_gru"
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")


def _build(root: Path, artifact: Path, name: str, adds: int = 1) -> None:
    engine = Engine.open(artifact, backend="torch")
    vecs = engine.encode_images(IMAGES)
    store = GalleryStore(root, scorer="numpy")
    store.create(name, kind="images", model=ModelRef.from_artifact(engine.artifact))
    for a in range(adds):
        store.add(name, vecs, ids=[f"a{a}-{j}" for j in range(len(vecs))])


def test_delete_gallery_over_http_and_cli(artifacts: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "galleries"
    _build(root, artifacts[MODEL], "by-http")
    _build(root, artifacts[MODEL], "by-cli")
    server = start_server(tmp_path, "--models", str(artifacts[MODEL]), env={"LNSERVE_SCORER": "numpy"})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            assert c.get("/galleries/by-http").json()["count"] == len(IMAGES)
            r = c.delete("/galleries/by-http")
            assert r.status_code == 204, r.text
            assert not (root / "by-http").exists()
            assert [p.name for p in root.iterdir() if "by-http" in p.name] == []  # no leftover either
            r = c.get("/galleries/by-http")
            assert r.status_code == 404 and r.json()["error"]["code"] == "gallery_not_found"
            r = c.delete("/galleries/by-http")
            assert r.status_code == 404 and r.json()["error"]["code"] == "gallery_not_found"
            r = c.delete("/galleries/bad%0Aname")
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
            names = [g["name"] for g in c.get("/galleries").json()["galleries"]]
            assert "by-http" not in names and "by-cli" in names
            # the name is free again: a new, empty gallery
            body = {"name": "by-http", "kind": "images", "model": MODEL}
            assert c.post("/galleries", json=body).status_code == 201
            assert c.get("/galleries/by-http").json()["count"] == 0

            # the CLI removes through the same store; the running server sees it gone at once
            run_cli("gallery", "rm", "by-cli", "--galleries-dir", str(root), check=True)
            r = c.get("/galleries/by-cli")
            assert r.status_code == 404 and r.json()["error"]["code"] == "gallery_not_found"
            assert c.get("/health").status_code == 200
    finally:
        server.stop()


# Runs the real removal in a child process, paused inside the file deletion (after the rename) until killed.
_HALF_WAY = """
import shutil, sys, time
from pathlib import Path
from lnserve.app.galleries import repository
from lnserve.app.galleries.store import GalleryStore

root, name, marker = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
real_rmtree = shutil.rmtree

def paused_rmtree(path, *args, **kwargs):
    (Path(path) / "vectors.f32").unlink()  # half the files gone...
    partial = marker.with_suffix(".partial")  # written whole, then renamed: the parent never reads half
    partial.write_text(str(path))
    partial.rename(marker)
    while True:  # ...and killed here
        time.sleep(1)

repository.shutil.rmtree = paused_rmtree
GalleryStore(root).remove(name)
"""


def test_removal_killed_half_way_leaves_the_gallery_or_nothing(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "galleries"
    _build(root, artifacts[MODEL], "big", adds=50)
    _build(root, artifacts[MODEL], "kept")
    marker = tmp_path / "half-way"
    child = subprocess.Popen([sys.executable, "-c", _HALF_WAY, str(root), "big", str(marker)])
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, "the removal exited before reaching the deletion"
            assert time.monotonic() < deadline, "the removal never reached the deletion"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    leftover = Path(marker.read_text())
    assert leftover.parent == root and leftover.name.startswith(".big.removed-") and leftover.is_dir()
    # killed half-way: the gallery is gone as a whole, not half-present
    assert not (root / "big").exists()
    listed = run_cli("gallery", "ls", "--galleries-dir", str(root), check=True).stdout
    assert "big" not in listed and "kept" in listed and "CORRUPT" not in listed

    server = start_server(tmp_path, "--models", str(artifacts[MODEL]), env={"LNSERVE_SCORER": "numpy"})
    try:
        assert not leftover.exists()  # deleted at start-up
        with httpx.Client(base_url=server.url, timeout=60) as c:
            r = c.get("/galleries/big")
            assert r.status_code == 404 and r.json()["error"]["code"] == "gallery_not_found"
            assert c.get("/galleries/kept").json()["count"] == len(IMAGES)
    finally:
        server.stop()
