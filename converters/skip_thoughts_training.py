"""Skip-thoughts checkpoints in the ``training/`` format (spec §5.4): ``MODEL.npz`` + ``MODEL.npz.pkl`` as
``train.py`` saves them, the ``vocab.py`` dictionary pkl and, optionally, a word2vec binary file for
vocabulary expansion. This is the layout of the layer-norm paper's own skip-thoughts release
(``lngru_may13_1700000.npz``).

The result is an ordinary skip-thoughts artifact with one uni-directional part: the word table holds the
model's own rows first (``<eos>``, ``UNK``, then worddict order) and the expansion's rows after them, so a
row's origin is its position (the manifest's ``vocabulary.model_words``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.errors import shown
from lnserve.hashing import sha256_file

from . import CONVERTER_VERSION
from .artifact import finish_manifest, save_weights, staging_dir, write_json
from .errors import CorruptFileError
from .families import SKIP_THOUGHTS
from .legacy_files import int_option, open_npz, read_legacy_pickle
from .param_map import check_params
from .skip_thoughts import DICTIONARY, TABLE_FILES, read_skip_half
from .vocab_expansion import fit_linear_map, plan_expansion, write_predictions
from .vocab_pickle import SPECIAL_WORDS, read_word_dictionary
from .word2vec import read_header

log = logging.getLogger("lnserve.converters")

Progress = Callable[[str, int, int], None]
SOURCE_FORMAT = "skip-thoughts-training"
_TRAINING_EXTRAS = ("decoder_", "ff_logit_")


def training_extra(key: str) -> bool:
    """Saved by ``train.py`` but not read by ``tools.encode`` (spec §5.5)."""
    return key in ("Wemb", "history_errs") or key.startswith(_TRAINING_EXTRAS) or key.endswith("_h0")


def _read_wemb(model: Path, n_words: int, dim_word: int) -> np.ndarray:
    expected = {"Wemb": (n_words, dim_word)}
    with open_npz(model) as npz:
        check_params(npz.headers(expected), expected, source=str(model))
        return npz.arrays(expected)["Wemb"]


def _model_words(dictionary: Path, n_words: int) -> tuple[list[str], int, list[str]]:
    """``<eos>``, ``UNK`` and the worddict words with index < n_words; the dictionary's size; notes."""
    worddict = read_word_dictionary(dictionary)
    own = worddict.words[: n_words - 2]
    clash = [w for w in own if w in SPECIAL_WORDS]
    if clash:
        raise CorruptFileError(
            f"{dictionary}: the word {shown(clash[0])!r} has a model row of its own, which would take over "
            f"the special {clash[0]!r} row; refusing an ambiguous dictionary"
        )
    notes = []
    if len(own) < n_words - 2:
        notes.append(
            f"the dictionary has {len(own)} words for the model's {n_words - 2} word rows: "
            f"rows {len(own) + 2}..{n_words - 1} have no word and are never used"
        )
    return ["<eos>", "UNK", *own], len(worddict.words), notes


def convert_skip_thoughts_training(
    *,
    model: Path,
    dictionary: Path,
    out: Path,
    name: str,
    word2vec: Path | None = None,
    cell: str | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Validate everything, expand the vocabulary if ``word2vec`` is given, write the artifact; returns its
    manifest. Every input is read before anything is written, and a failure leaves nothing at ``out``."""
    half = read_skip_half(model, "uni", cell=cell, expected_extra=training_extra)
    pkl = Path(f"{model}.pkl")
    n_words = int_option(read_legacy_pickle(pkl), "n_words", pkl)
    if n_words < 2:
        raise CorruptFileError(f"{pkl}: n_words {n_words} leaves no room for <eos> and UNK")
    wemb = _read_wemb(model, n_words, half.dim_word)
    words, dictionary_size, notes = _model_words(dictionary, n_words)
    model_rows = wemb[: len(words)]
    sources = {**half.sources, dictionary.name: sha256_file(dictionary)}
    vocabulary: dict[str, Any] = {
        "model_words": len(words),
        "expansion_words": 0,
        "dictionary_words": dictionary_size,
        "dictionary_words_beyond_model": dictionary_size - (len(words) - 2),
    }
    expansion: dict[str, Any] | None = None
    header = plan = linear_map = None
    if word2vec is not None:
        header = read_header(word2vec)
        index = {w: i for i, w in enumerate(words)}
        plan = plan_expansion(
            header, index, progress=(lambda d, t: progress("reading word2vec", d, t)) if progress else None
        )
        del index
        linear_map = fit_linear_map(plan.fit_vectors, model_rows[plan.fit_rows])
        if linear_map.words_shared <= header.dim:
            notes.append(
                f"the expansion was fit on {linear_map.words_shared} shared words for {header.dim + 1} "
                "unknowns: under-determined, the minimum-norm solution was used"
            )
        sources[word2vec.name] = plan.sha256
        vocabulary.update(
            expansion_words=len(plan.words),
            word2vec_words=header.count,
            word2vec_duplicates=plan.duplicates,
        )
        expansion = linear_map.summary()
        log.info("vocabulary expansion: %s", expansion)
    table_name = TABLE_FILES["uni"][1]
    n_rows = len(words) + (len(plan.words) if plan else 0)
    with staging_dir(out, overwrite=overwrite) as tmp:
        with (tmp / table_name).open("wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (n_rows, half.dim_word)}
            )
            f.write(np.ascontiguousarray(model_rows, dtype="<f4").tobytes())
            if plan is not None and header is not None and linear_map is not None:
                write_predictions(
                    header,
                    plan,
                    linear_map,
                    f,
                    progress=(lambda d, t: progress("expanding vocabulary", d, t)) if progress else None,
                )
                words = [*words, *plan.words]
        save_weights(tmp, half.tensors)
        write_json(tmp / DICTIONARY, {"words": words})
        manifest = {
            "name": name,
            "family": SKIP_THOUGHTS.name,
            "demo": False,
            "description": "",
            "converter_version": CONVERTER_VERSION,
            "source_format": SOURCE_FORMAT,
            "parts": {"uni": {"cell": half.cell, "dim": half.dim, "table": table_name}},
            "dims": {"dim_word": half.dim_word, "n_table_rows": n_rows, "output_dim": half.dim},
            "tokenizer": SKIP_THOUGHTS.tokenizer,
            "defaults": dict(SKIP_THOUGHTS.defaults),
            "vocabulary": vocabulary,
            "expansion": expansion,
            "sources": sources,
            "notes": [*half.notes, *notes],
        }
        return finish_manifest(tmp, manifest)
