"""The README's first command: a fresh `lnserve serve` serves the trained demo model and its gallery, and
retrieval answers make sense."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.server import start_server


def test_demo_model_and_gallery_answer_sensibly(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        info = httpx.get(server.url + "/info").json()
        assert [m["name"] for m in info["models"]] == ["demo-lngru"] and info["models"][0]["demo"] is True
        assert "demo-images" in [g["name"] for g in info["galleries"]]
        body = {"gallery": "demo-images", "query": {"text": "a red circle"}, "k": 5}
        out = httpx.post(server.url + "/retrieve", json=body, timeout=60).json()
        assert out["score"]["direction"] == "lower_is_better"
        for hit in out["results"]:
            shapes = {(o["colour"], o["shape"]) for o in hit["payload"]["objects"]}
            assert ("red", "circle") in shapes, hit
    finally:
        assert server.stop() in (0, -15)
