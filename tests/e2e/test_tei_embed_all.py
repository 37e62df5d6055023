"""``POST /embed_all`` (TEI's shape) against the PyTorch modules (``models/``) on the legacy fixtures: each
row is the recurrence's state after that token, and the last row, normalised as the model does, is the
``/embed`` vector (order-embedding with abs, and combine-skip's uni and bi halves)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch modules are the reference")

from lnserve.app.runtime.torch_backend import build_module  # noqa: E402
from lnserve.converters.artifact import read_artifact  # noqa: E402
from lnserve.models.recurrence import Recurrence, length_mask  # noqa: E402
from tests.e2e.server import LiveServer, start_server  # noqa: E402

TEXTS = ["a man riding a horse on the beach .", "two dogs", "zebra"]
TOL = 1e-5


@pytest.fixture(scope="module", params=["oe_order_lngru", "oe_symmetric_gru", "skipthoughts_lngru"])
def served(
    request: pytest.FixtureRequest, artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, Path]]:
    path = artifacts[request.param]
    srv = start_server(tmp_path_factory.mktemp("embed_all"), "--models", str(path))
    yield srv, path
    srv.stop()


def _states(rnn: Recurrence, x: np.ndarray) -> np.ndarray:
    """Every state of one sentence (T, d), through the reference module."""
    xt = torch.from_numpy(np.array(x[:, None, :], dtype=np.float32))  # a copy: x may be reversed
    with torch.inference_mode():
        states = rnn(xt, length_mask(torch.tensor([len(x)]), len(x)))
    return np.stack([s[0][0].numpy() for s in states])


def _reference(path: Path, ids: list[int]) -> np.ndarray:
    """The rows /embed_all must give, from the PyTorch modules: the state after each token; bi-skip's
    backward half at row t is its state after reading tokens t..0 (the first t + 1, from the last back)."""
    artifact = read_artifact(path)
    module = build_module(artifact)
    if artifact.family == "order-embedding":
        wemb = module.sentence.embedding.weight.detach().numpy()
        return _states(module.sentence.rnn, wemb[ids])
    parts = []
    for part, info in artifact.manifest["parts"].items():
        x = np.asarray(artifact.table(info["table"]))[ids]
        if part == "uni":
            parts.append(_states(module.uni, x))
        else:
            bwd = np.stack([_states(module.bi_bwd, x[: t + 1][::-1])[-1] for t in range(len(ids))])
            parts += [_states(module.bi_fwd, x), bwd]
    return np.concatenate(parts, axis=1)


def _normalised(path: Path, last: np.ndarray) -> np.ndarray:
    """The sentence vector from the last raw state, as the model normalises it (spec §6.1, §6.3)."""
    m = read_artifact(path).manifest
    if m["family"] == "order-embedding":
        v = last / np.linalg.norm(last)
        return np.abs(v) if m["options"]["abs"] else v
    halves, start = [], 0
    for part in m["parts"]:
        width = m["parts"][part]["dim"] * (2 if part == "bi" else 1)
        half = last[start : start + width]
        halves.append(half / np.linalg.norm(half))
        start += width
    return np.concatenate(halves)


def test_embed_all_rows_are_the_states_after_each_token(served: tuple[LiveServer, Path]) -> None:
    srv, path = served
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        rows = http.post("/embed_all", json={"inputs": TEXTS})
        assert rows.status_code == 200, rows.text
        tokens = http.post("/tokenize", json={"inputs": TEXTS}).json()
        vectors = np.asarray(http.post("/embed", json={"inputs": TEXTS}).json(), dtype=np.float64)
        single = http.post("/embed_all", json={"inputs": TEXTS[1]}).json()
    assert len(rows.json()) == len(TEXTS)
    for text, got, toks, vector in zip(TEXTS, rows.json(), tokens, vectors, strict=True):
        got = np.asarray(got, dtype=np.float64)
        ids = [t["id"] for t in toks]
        assert got.shape == (len(ids), len(vector)), text  # one row per token the model steps on
        ref = _reference(path, ids)
        assert float(np.abs(got - ref).max()) <= TOL, text
        assert float(np.abs(_normalised(path, got[-1]) - vector).max()) <= TOL, text
    assert np.allclose(np.asarray(single), np.asarray(rows.json()[1]), atol=TOL)


def test_embed_all_is_bounded_like_embed(served: tuple[LiveServer, Path]) -> None:
    """At most max_sentences rows in all (one per token): the answer is never larger than /embed's."""
    srv, _ = served
    r = httpx.post(srv.url + "/embed_all", json={"inputs": ["a b c d e f g h"] * 40}, timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_many_sentences", r.text
    assert "tokens in one request" in r.json()["error"]["message"]
    for bad, status in (
        ({"inputs": [1, 2]}, 422),
        ({"inputs": []}, 422),
        ({"inputs": "a", "prompt_name": "q"}, 422),
    ):
        assert httpx.post(srv.url + "/embed_all", json=bad, timeout=60).status_code == status, bad


def test_normalize_false_is_the_raw_last_state_and_the_schema_says_so(
    served: tuple[LiveServer, Path],
) -> None:
    """``normalize: false`` drops the L2 norm and, on order models, the abs; every ``normalize`` field of the
    schema says so (it said only "L2-normalise")."""
    srv, path = served
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        schemas = http.get("/openapi.json").json()["components"]["schemas"]
        described = [
            props["normalize"].get("description", "")
            for schema in schemas.values()
            for props in [schema.get("properties", {})]
            if "normalize" in props
        ]
        assert len(described) >= 3 and all("no abs" in d and "raw last state" in d for d in described)
        last = np.asarray(http.post("/embed_all", json={"inputs": TEXTS}).json()[0][-1])
        for route, body in (("/encode", {"sentences": TEXTS[:1]}), ("/embed", {"inputs": TEXTS[:1]})):
            raw = http.post(route, json={**body, "normalize": False}).json()
            vec = http.post(route, json={**body, "normalize": True}).json()
            raw, vec = (np.asarray(v["vectors"] if isinstance(v, dict) else v)[0] for v in (raw, vec))
            assert float(np.abs(raw - last).max()) <= TOL, route
            assert float(np.abs(_normalised(path, raw) - vec).max()) <= TOL, route


def test_decode_gives_back_the_tokens_of_every_model_family(served: tuple[LiveServer, Path]) -> None:
    """``/decode`` reads the model's own vocabulary: order-embedding's worddict, skip-thoughts' tables; an
    unknown word comes back as ``UNK``, the appended ``<eos>`` as ``<eos>`` unless skipped."""
    srv, _ = served
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        sentences = http.post("/tokenize", json={"sentences": [*TEXTS, "a qwzxv"], "eos": True}).json()
        ids = [[t["id"] for t in s["tokens"]] for s in sentences["sentences"]]
        texts = http.post("/decode", json={"ids": ids, "skip_special_tokens": False}).json()
        skipped = http.post("/decode", json={"ids": ids}).json()
    for s, text, short in zip(sentences["sentences"], texts, skipped, strict=True):
        words = ["UNK" if t["unknown"] else t["token"] for t in s["tokens"]]
        assert text == " ".join(words) and words[-1] == "<eos>", (text, words)
        assert short == " ".join(words[:-1])
    assert "UNK" in texts[-1]
