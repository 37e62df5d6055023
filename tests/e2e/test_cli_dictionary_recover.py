"""``lnserve dictionary recover`` (issue 26) on a uni-skip directory built the way ``training/tools.py``
``lookup_table`` builds one: regression rows stored (1, dim_word), then the model's ``Wemb`` rows written over
them as (dim_word,) arrays, keys in an arbitrary (Python 2 dict) order. The recovered dictionary is the
model's exactly, in the vocab.py bytes, and the training-format converter then reproduces the goldens."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from lnserve.converters.vocab_pickle import read_word_dictionary, write_word_dictionary
from tests.conftest import LEGACY, golden, run_cli
from tests.e2e.test_cli_errors import assert_refused
from tests.support.uni_skip_pair import build_uni_skip, model_words

SRC = LEGACY / "skipthoughts_training_lngru"


def test_recover_gives_the_models_dictionary_exactly(tmp_path: Path) -> None:
    uni = build_uni_skip(tmp_path / "uni")
    out = tmp_path / "dict.pkl"
    proc = run_cli("dictionary", "recover", "--uni-skip", str(uni), "--out", str(out), check=True)
    assert "recovered 418 words" in proc.stdout
    words = model_words()[2:]
    expected = io.BytesIO()
    write_word_dictionary(expected, {w: i for i, w in enumerate(words, start=2)}, {})
    assert out.read_bytes() == expected.getvalue()
    assert read_word_dictionary(out).words == words
    with out.open("rb") as f:  # two plain pickles, as vocab.py's loader reads them
        worddict = pickle.load(f, encoding="latin1")
        assert pickle.load(f, encoding="latin1") == {} and f.read() == b""
    assert list(worddict.values()) == list(range(2, 420))
    # the recovered dictionary converts the training-format model to the goldens
    model = tmp_path / "model"
    model.mkdir()
    for name in ("model.npz", "model.npz.pkl"):
        shutil.copy(SRC / name, model / name)
    art = tmp_path / "art"
    run_cli(
        "convert", "skip-thoughts-training", str(model / "model.npz"), "--dictionary", str(out),
        "--word2vec", str(SRC / "w2v.bin"), "--out", str(art), check=True,
    )  # fmt: skip
    text = tmp_path / "s.txt"
    sentences = json.loads((LEGACY / "inputs_training.json").read_text())["sentences"]
    # a dictionary word beyond n_words (zeppelin) got its row through word2vec, as it did in the original
    text.write_text("\n".join(s for s in sentences if "café" not in s) + "\n", encoding="utf-8")
    vecs = tmp_path / "v.npy"
    run_cli("encode", str(art), "--input", str(text), "--output", str(vecs), "--pretokenized", check=True)
    keep = [i for i, s in enumerate(sentences) if "café" not in s]
    gold = golden("skipthoughts_training_lngru")["feat_exp_norm1_eos0"][keep]
    assert np.abs(np.load(vecs) - gold).max() <= 1e-5


@pytest.mark.parametrize("case", ["tampered_model_row", "missing_dictionary_line"])
def test_recover_refuses_a_table_not_built_from_the_model(tmp_path: Path, case: str) -> None:
    uni = build_uni_skip(tmp_path / "uni", tamper=case == "tampered_model_row")
    if case == "missing_dictionary_line":
        lines = (uni / "dictionary.txt").read_bytes().split(b"\n")
        (uni / "dictionary.txt").write_bytes(b"\n".join(lines[1:]))
    out = tmp_path / "dict.pkl"
    proc = run_cli("dictionary", "recover", "--uni-skip", str(uni), "--out", str(out))
    assert_refused(proc, "table_mismatch")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["uni"]
