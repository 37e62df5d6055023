"""The skip-thoughts ``training/`` format (the LN skip-thoughts release, issue 26) end to end: the fixture set
converted by the real CLI with and without ``--word2vec``, then every golden feature over HTTP from a real
server, for both backends and every ``use_norm`` / ``use_eos``; ``/tokenize`` marks each token's origin as
the original's table did; the expanded table's rows and the fit match the original's."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lnserve.converters.artifact import read_artifact
from tests.conftest import LEGACY, golden, run_cli
from tests.e2e.server import start_server

TOL = 1e-5
SRC = LEGACY / "skipthoughts_training_lngru"
TAGS = ("noexp", "exp")
SOURCE_CODES = {"unk": 0, "model": 1, "expansion": 2}  # the golden token_source_* values


def training_inputs() -> dict[str, Any]:
    return json.loads((LEGACY / "inputs_training.json").read_text(encoding="utf-8"))


def convert_cli(out: Path, *, expand: bool) -> None:
    extra = ("--word2vec", str(SRC / "w2v.bin")) if expand else ()
    run_cli(
        "convert",
        "skip-thoughts-training",
        str(SRC / "model.npz"),
        "--dictionary",
        str(SRC / "dictionary.pkl"),
        *extra,
        "--out",
        str(out),
        "--name",
        f"ln_{'exp' if expand else 'noexp'}",
        check=True,
    )


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("training_format")
    out = {}
    for tag in TAGS:
        convert_cli(root / f"ln_{tag}", expand=tag == "exp")
        out[tag] = root / f"ln_{tag}"
    return out


@pytest.fixture(scope="module", params=["torch", "onnx"])
def server_url(
    request: pytest.FixtureRequest, converted: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp(f"server_{request.param}")
    models = [arg for tag in TAGS for arg in ("--models", str(converted[tag]))]
    server = start_server(tmp, *models, "--backend", request.param)
    try:
        yield server.url
    finally:
        server.stop()


def test_manifest_records_vocabulary_fit_and_sources(converted: dict[str, Path]) -> None:
    gold = golden("skipthoughts_training_lngru")
    model = training_inputs()["model"]
    for tag in TAGS:
        manifest = read_artifact(converted[tag]).manifest
        assert manifest["dims"]["n_table_rows"] == int(gold[f"table_size_{tag}"])
        assert manifest["defaults"] == {"eos": False, "normalize": True}
        assert manifest["parts"] == {"uni": {"cell": "lngru", "dim": model["dim"], "table": "uni_table.npy"}}
        vocab = manifest["vocabulary"]
        assert vocab["model_words"] == model["n_words"]
        assert vocab["dictionary_words"] == model["worddict_size"]
        wanted = {"model.npz", "model.npz.pkl", "dictionary.pkl"} | ({"w2v.bin"} if tag == "exp" else set())
        assert set(manifest["sources"]) == wanted
        assert all(len(h) == 64 for h in manifest["sources"].values())
    exp = read_artifact(converted["exp"]).manifest
    assert exp["vocabulary"]["expansion_words"] == int(gold["table_size_exp"]) - model["n_words"]
    assert exp["vocabulary"]["word2vec_words"] == model["w2v_words"]
    assert exp["expansion"]["words_shared"] == int(gold["regression_n"])
    assert 0 < exp["expansion"]["residual_rms"] < 1
    assert read_artifact(converted["noexp"]).manifest["expansion"] is None


def test_expanded_table_rows_match_the_original(converted: dict[str, Path]) -> None:
    """Probe rows: model rows stay the model's, predicted rows match lookup_table's, absent words absent."""
    gold = golden("skipthoughts_training_lngru")
    art = read_artifact(converted["exp"])
    words = art.read_json("dictionary.json")["words"]
    index = {w: i for i, w in enumerate(words)}
    table = art.table("uni_table.npy")
    model_rows = art.manifest["vocabulary"]["model_words"]
    probes = training_inputs()["table_probe_words"]
    for k, word in enumerate(probes):
        kind = int(gold["table_probe_is_prediction"][k])
        if kind == -1:
            assert word not in index, word
            continue
        row = index[word]
        assert (row >= model_rows) == (kind == 1), word
        assert np.abs(table[row] - gold["table_probe_rows"][k]).max() <= TOL, word


@pytest.mark.parametrize("tag", TAGS)
def test_http_encode_matches_every_golden(server_url: str, tag: str) -> None:
    gold = golden("skipthoughts_training_lngru")
    sentences = training_inputs()["sentences"]
    with httpx.Client(base_url=server_url, timeout=60) as client:
        for norm in (1, 0):
            for eos in (0, 1):
                body = {
                    "model": f"ln_{tag}",
                    "sentences": sentences,
                    "pretokenized": True,
                    "normalize": bool(norm),
                    "eos": bool(eos),
                }
                r = client.post("/encode", json=body)
                assert r.status_code == 200, r.text
                ours = np.asarray(r.json()["vectors"], dtype=np.float32)
                want = gold[f"feat_{tag}_norm{norm}_eos{eos}"]
                assert ours.shape == want.shape
                assert np.abs(ours - want).max() <= TOL, (tag, norm, eos)
        # the defaults are the original's: use_norm=True, use_eos=False
        r = client.post("/encode", json={"model": f"ln_{tag}", "sentences": sentences, "pretokenized": True})
        assert np.abs(np.asarray(r.json()["vectors"]) - gold[f"feat_{tag}_norm1_eos0"]).max() <= TOL
        r = client.post("/v1/embeddings", json={"model": f"ln_{tag}", "input": sentences[:3]})
        assert r.status_code == 200, r.text
        assert len(r.json()["data"]) == 3


@pytest.mark.parametrize("tag", TAGS)
def test_http_tokenize_marks_each_tokens_origin(server_url: str, tag: str) -> None:
    gold = golden("skipthoughts_training_lngru")
    sentences = training_inputs()["sentences"]
    with httpx.Client(base_url=server_url, timeout=60) as client:
        r = client.post(
            "/tokenize",
            json={"model": f"ln_{tag}", "sentences": sentences, "pretokenized": True, "eos": True},
        )
        assert r.status_code == 200, r.text
    for i, sent in enumerate(r.json()["sentences"]):
        want = [int(x) for x in gold[f"token_source_{tag}"][i] if x >= 0]
        tokens = sent["tokens"]
        assert [SOURCE_CODES[t["source"]] for t in tokens[:-1]] == want, sentences[i]
        assert tokens[-1]["token"] == "<eos>" and tokens[-1]["source"] == "model"
        assert [t["token"] for t in tokens[:-1]] == sentences[i].split()


def test_cli_encode_and_onnx_export(converted: dict[str, Path], tmp_path: Path) -> None:
    """``lnserve encode`` on both backends after ``lnserve export``, default flags = the original's."""
    gold = golden("skipthoughts_training_lngru")
    text = tmp_path / "s.txt"
    text.write_text("\n".join(training_inputs()["sentences"]) + "\n", encoding="utf-8")
    art = tmp_path / "ln_exp"
    shutil.copytree(converted["exp"], art)  # export writes into the artifact: the servers share the original
    run_cli("export", str(art), check=True)
    for backend in ("onnx", "torch"):
        out = tmp_path / f"{backend}.npy"
        run_cli(
            "encode",
            str(art),
            "--input",
            str(text),
            "--output",
            str(out),
            "--pretokenized",
            "--backend",
            backend,
            check=True,
        )
        assert np.abs(np.load(out) - gold["feat_exp_norm1_eos0"]).max() <= TOL, backend
