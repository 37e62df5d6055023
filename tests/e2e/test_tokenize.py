"""``POST /tokenize`` over a real server, for both families: the tokens and ids are exactly those ``/encode``
runs on (the engine's own ``token_ids``), unknown words are marked, and the counts agree with ``/encode``'s
``token_counts`` / ``unk_counts``."""

from __future__ import annotations

from pathlib import Path

import httpx

from lnserve.app.runtime.engine import Engine
from tests.conftest import inputs
from tests.e2e.server import start_server

OE, ST = "oe_order_gru", "skipthoughts_gru"


def test_tokenize_both_families_match_encode(artifacts: dict[str, Path], tmp_path: Path) -> None:
    oe_caps: list[str] = [*inputs()["order_embedding"]["captions"][:3], "A Zorblax, on the MOON!"]
    st_sents: list[str] = [*inputs()["skipthoughts"]["sentences"][:3], "Zorblax quuxed the ferret."]
    server = start_server(
        tmp_path,
        "--models",
        str(artifacts[OE]),
        "--models",
        str(artifacts[ST]),
        env={"LNSERVE_MAX_SENTENCES": "8"},
    )
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            for name, sents, tokenizer in ((OE, oe_caps, "coco"), (ST, st_sents, "treebank")):
                engine = Engine.open(artifacts[name], backend="torch")
                for pretok in (False, True):
                    r = c.post("/tokenize", json={"model": name, "sentences": sents, "pretokenized": pretok})
                    assert r.status_code == 200, r.text
                    out = r.json()
                    eos = engine.defaults["eos"]
                    assert out["model"] == name and out["eos"] == eos
                    assert out["tokenizer"] == ("whitespace" if pretok else tokenizer)
                    assert out["unk_id"] == engine.vocab.unk
                    want_ids = engine.token_ids(sents, pretokenized=pretok, eos=eos)
                    enc = c.post("/encode", json={"model": name, "sentences": sents, "pretokenized": pretok})
                    assert enc.status_code == 200, enc.text
                    for i, sent in enumerate(out["sentences"]):
                        assert [t["id"] for t in sent["tokens"]] == want_ids[i]
                        assert [t["unknown"] for t in sent["tokens"]] == [
                            x == engine.vocab.unk for x in want_ids[i]
                        ]
                        assert sent["token_count"] == enc.json()["token_counts"][i]
                        assert sent["unk_count"] == enc.json()["unk_counts"][i]
                    if eos:
                        assert all(s["tokens"][-1]["token"] == "<eos>" for s in out["sentences"])
                # the made-up word is marked unknown and shown as the tokenizer saw it
                r = c.post("/tokenize", json={"model": name, "sentences": [sents[-1]], "eos": False})
                toks = r.json()["sentences"][0]["tokens"]
                zorb = [t for t in toks if t["token"].lower() == "zorblax"]
                assert zorb and zorb[0]["unknown"] is True and zorb[0]["id"] == engine.vocab.unk
                assert toks[-1]["token"] != "<eos>"
                if name == OE:  # coco: lowercase, punctuation removed
                    assert [t["token"] for t in toks] == ["a", "zorblax", "on", "the", "moon"]

            # bad input: clear 4xx, never a 500
            r = c.post("/tokenize", json={"model": "nope", "sentences": ["a"]})
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
            r = c.post("/tokenize", json={"sentences": []})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
            r = c.post("/tokenize", json={"sentences": ["a"] * 9})
            assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_sentences"
            assert c.get("/health").status_code == 200
    finally:
        server.stop()


def test_tokenize_has_the_limits_of_encode(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """One long sentence took 15 s and answered 41.6 MB (every token echoed): /tokenize now refuses what
    /encode refuses (max_tokens, max_sentences, in bodies of any size) and cuts with truncate exactly as
    /encode cuts."""
    server = start_server(
        tmp_path,
        "--models",
        str(artifacts[OE]),
        env={"LNSERVE_MAX_TOKENS": "16", "LNSERVE_MAX_SENTENCES": "4"},
    )
    try:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            for words in (17, 400_000):  # just over the limit; a 1.6 MB body (parsed off the loop)
                long = " ".join(["dog"] * words)
                for pretok in (False, True):
                    r = c.post("/tokenize", json={"model": OE, "sentences": [long], "pretokenized": pretok})
                    assert r.status_code == 422 and r.json()["error"]["code"] == "sentence_too_long", r.text[
                        :300
                    ]
                    assert len(r.content) < 1000
                r = c.post("/tokenize", json={"model": OE, "sentences": ["a", long], "truncate": True})
                assert r.status_code == 200, r.text[:300]
                sents = r.json()["sentences"]
                enc = c.post("/encode", json={"model": OE, "sentences": ["a", long], "truncate": True}).json()
                assert (
                    [s["token_count"] for s in sents]
                    == enc["token_counts"]
                    == [len(s["tokens"]) for s in sents]
                )
                assert sents[1]["token_count"] == 16
            big = ["a dog " * 3000] * 5  # 90 kB: the worker process applies max_sentences
            r = c.post("/tokenize", json={"model": OE, "sentences": big})
            assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_sentences", r.text[:300]
            r = c.post("/tokenize", json={"model": OE, "sentences": ["a dog"] * 5})
            assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_sentences"
            assert c.get("/health").status_code == 200
    finally:
        server.stop()
