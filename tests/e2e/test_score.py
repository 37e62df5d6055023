"""``POST /score`` over a real server: the caption x image error matrix equals what ``lnserve score`` (the
real CLI) writes for the same model's vectors, for order and symmetric (cosine) models, within 1e-5."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np

from tests.conftest import LEGACY, inputs, run_cli
from tests.e2e.server import start_server

ORDER, SYM, ST = "oe_order_gru", "oe_symmetric_gru", "skipthoughts_gru"
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")
CAPTIONS: list[str] = inputs()["order_embedding"]["captions"]


def _cli_scores(c: httpx.Client, model: str, artifact: Path, tmp: Path) -> np.ndarray:
    """``lnserve score`` on the vectors ``/encode`` and ``/encode/images`` give (the model's defaults)."""
    caps = c.post("/encode", json={"model": model, "sentences": CAPTIONS}).json()["vectors"]
    ims = c.post("/encode/images", json={"model": model, "features": IMAGES.tolist()}).json()["vectors"]
    np.save(tmp / f"{model}-caps.npy", np.asarray(caps, dtype=np.float32))
    np.save(tmp / f"{model}-ims.npy", np.asarray(ims, dtype=np.float32))
    out = tmp / f"{model}-errs.npy"
    run_cli("score", str(artifact), "--sentences", str(tmp / f"{model}-caps.npy"), "--images",
            str(tmp / f"{model}-ims.npy"), "--output", str(out), check=True)  # fmt: skip
    return np.load(out)


def test_score_matches_the_cli(artifacts: dict[str, Path], tmp_path: Path) -> None:
    models = [artifacts[m] for m in (ORDER, SYM, ST)]
    server = start_server(tmp_path, *[a for m in models for a in ("--models", str(m))])
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            for model, metric in ((ORDER, "order_violation"), (SYM, "negative_cosine")):
                body = {"model": model, "captions": CAPTIONS, "images": IMAGES.tolist()}
                r = c.post("/score", json=body)
                assert r.status_code == 200, r.text
                out = r.json()
                assert out["model"] == model and out["score"]["metric"] == metric
                assert out["score"]["direction"] == "lower_is_better"
                got = np.asarray(out["scores"], dtype=np.float32)
                assert got.shape == (len(CAPTIONS), len(IMAGES))
                np.testing.assert_allclose(got, _cli_scores(c, model, artifacts[model], tmp_path), atol=1e-5)
            # the default model is the first one: the order model
            r = c.post("/score", json={"captions": CAPTIONS[:2], "images": IMAGES[:3].tolist()})
            assert r.status_code == 200 and r.json()["model"] == ORDER
            assert np.asarray(r.json()["scores"]).shape == (2, 3)

            bad = {
                "skip-thoughts": ({"model": ST, "captions": ["a"], "images": [[0.0]]}, 422, "invalid_input"),
                "image width": ({"captions": ["a"], "images": [[0.1, 0.2]]}, 422, "invalid_input"),
                "no captions": ({"captions": [], "images": IMAGES[:1].tolist()}, 422, "invalid_request"),
                "unknown model": (
                    {"model": "x", "captions": ["a"], "images": [[0.0]]},
                    404,
                    "model_not_found",
                ),
                "too many": (
                    {"captions": ["a"] * 300, "images": IMAGES[:1].tolist()},
                    422,
                    "too_many_sentences",
                ),
            }
            for why, (body, status, code) in bad.items():
                r = c.post("/score", json=body)
                assert (r.status_code, r.json()["error"]["code"]) == (status, code), (why, r.text)
            assert c.get("/health").status_code == 200
    finally:
        server.stop()
