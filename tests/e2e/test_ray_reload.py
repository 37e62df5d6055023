"""``POST /models/NAME/reload`` under ``lnserve serve --ray --replicas 2`` (a real local Ray instance on
127.0.0.1): the reload reaches both replicas (``/models`` shows one sha256 whichever replica answers, and
both encode with the new weights); a reload that cannot load answers 422 ``reload_failed`` and both
replicas keep the version they served; a replica started later (the replacement of one killed with
SIGKILL) loads the current version, not the one the service started with. Both ingresses: behind Serve's
proxy, and with the replicas serving the port themselves (``--ingress direct``)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.server import start_server
from tests.e2e.test_reload import AUTH, CAPTIONS, KEY, NAME, _convert, _expected

pytest.importorskip("ray.serve", reason="needs the ray extra: pip install 'lnserve[ray]'")
pytestmark = pytest.mark.ray

POLL_LIMIT = 400  # routing is random: requests until every replica has answered
CLOSE = {"Connection": "close"}  # a new connection per request: with direct ingress one sticks to a replica


def _per_replica(c: httpx.Client, request: Callable[[], httpx.Response], replicas: int = 2) -> dict[str, Any]:
    """One answer (JSON) from each replica."""
    seen: dict[str, Any] = {}
    for _ in range(POLL_LIMIT):
        r = request()
        assert r.status_code == 200, r.text
        seen.setdefault(r.headers["x-lnserve-replica"], r.json())
        if len(seen) == replicas:
            return seen
    pytest.fail(f"only {len(seen)} replica(s) answered {POLL_LIMIT} requests")


def _shas(c: httpx.Client) -> dict[str, str]:
    got = _per_replica(c, lambda: c.get("/models", headers=CLOSE))
    return {rep: next(m["sha256"] for m in body["models"] if m["name"] == NAME) for rep, body in got.items()}


def _vectors(c: httpx.Client) -> dict[str, np.ndarray]:
    got = _per_replica(c, lambda: c.post("/encode", json={"sentences": CAPTIONS}, headers=CLOSE))
    return {rep: np.asarray(body["vectors"], dtype=np.float32) for rep, body in got.items()}


@pytest.mark.parametrize("ingress", ["proxy", "direct"])
def test_reload_reaches_every_replica_all_or_none(tmp_path: Path, ingress: str) -> None:
    model_dir = tmp_path / "models" / NAME
    model_dir.parent.mkdir()
    _convert(model_dir)
    v1 = _expected(model_dir)
    snapshot = tmp_path / "v2"
    _convert(snapshot, tuned=True)
    v2 = _expected(snapshot)
    server = start_server(
        tmp_path, "--ray", "--replicas", "2", "--ingress", ingress, "--models", str(model_dir),
        env={"LNSERVE_API_KEY": KEY, "LNSERVE_SCORER": "numpy"}, timeout=300,
    )  # fmt: skip
    try:
        with httpx.Client(base_url=server.url, timeout=300, headers=AUTH) as c:
            (v1_sha,) = set(_shas(c).values())
            for vec in _vectors(c).values():
                np.testing.assert_allclose(vec, v1, atol=1e-5)

            # v2 installed: one reload swaps both replicas
            shutil.rmtree(model_dir)
            shutil.copytree(snapshot, model_dir)
            r = c.post(f"/models/{NAME}/reload")
            assert r.status_code == 200, r.text
            v2_sha = r.json()["sha256"]
            assert v2_sha != v1_sha
            assert set(_shas(c).values()) == {v2_sha}
            for vec in _vectors(c).values():
                np.testing.assert_allclose(vec, v2, atol=1e-5)

            # a damaged directory: no replica swaps, both serve v2 on
            weights = next(p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".npz", ".onnx"))
            good = weights.read_bytes()
            weights.write_bytes(good[:-7])
            r = c.post(f"/models/{NAME}/reload")
            assert r.status_code == 422, r.text
            err = r.json()["error"]
            assert err["code"] == "reload_failed" and "on any of 2 replicas" in err["message"], err
            assert set(_shas(c).values()) == {v2_sha}
            for vec in _vectors(c).values():
                np.testing.assert_allclose(vec, v2, atol=1e-5)
            weights.write_bytes(good)

            # a replica started later (a replacement) loads the current version, not the start-up one
            answers = _per_replica(c, lambda: c.get("/info", headers=CLOSE))
            pids = {rep: body["engine"]["pid"] for rep, body in answers.items()}
            victim = next(iter(pids))
            os.kill(pids[victim], signal.SIGKILL)
            deadline = time.monotonic() + 180
            shas: dict[str, str] = {}
            while victim in shas or len(shas) < 2:
                assert time.monotonic() < deadline, f"the killed replica was not replaced: {shas}"
                time.sleep(0.2)
                try:
                    r = c.get("/models", headers=CLOSE)
                except httpx.TransportError:
                    continue
                if r.status_code == 200:
                    rep = r.headers["x-lnserve-replica"]
                    shas[rep] = next(m["sha256"] for m in r.json()["models"] if m["name"] == NAME)
                    shas.pop(victim, None)
            assert set(shas.values()) == {v2_sha}, shas
    finally:
        assert server.stop(timeout=60) in (0, -signal.SIGTERM), server.log()[-3000:]
