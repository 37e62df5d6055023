"""A uni-skip directory built the way ``training/tools.py`` ``lookup_table`` builds one (issue 26), from the
training-format fixture's ``Wemb``: regression rows stored (1, dim_word), then the model's rows written over
them as (dim_word,) arrays, keys in an arbitrary (Python 2 dict) order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lnserve.converters.word2vec import iter_blocks, read_header
from tests.conftest import LEGACY
from tests.support.legacy_format import write_legacy_table

SRC = LEGACY / "skipthoughts_training_lngru"


def model_words() -> list[str]:
    inputs = json.loads((LEGACY / "inputs_training.json").read_text(encoding="utf-8"))
    return ["<eos>", "UNK", *inputs["worddict_words_in_index_order"][: inputs["model"]["n_words"] - 2]]


def build_uni_skip(root: Path, *, tamper: bool = False) -> Path:
    """uni_skip.npz (Wemb), utable.npy (Python 2's numpy.save of the rows) and dictionary.txt."""
    with np.load(SRC / "model.npz") as npz:
        wemb = npz["Wemb"]
    words = model_words()
    rng = np.random.default_rng(7)
    table: dict[str, np.ndarray] = {}
    for block in iter_blocks(read_header(SRC / "w2v.bin")):  # stand-in predictions, stored (1, dim_word)
        for word in block.words:
            if "_" not in word:
                table[word] = rng.standard_normal((1, wemb.shape[1])).astype(np.float32)
    for i, word in enumerate(words):
        table[word] = wemb[i].copy()  # the model's own rows: (dim_word,)
    if tamper:
        table[words[5]] = table[words[5]] + np.float32(1e-3)
    keys = list(table)
    rng.shuffle(keys)  # Python 2 dict order carries no meaning
    root.mkdir(parents=True, exist_ok=True)
    np.savez(root / "uni_skip.npz", Wemb=wemb)
    write_legacy_table(root / "utable.npy", (table[k] for k in keys), len(keys))
    (root / "dictionary.txt").write_bytes(b"".join(k.encode("utf-8") + b"\n" for k in keys))
    return root
