"""Recover the uni-skip ``vocab.py`` dictionary from the published files (issue 26).

``training/tools.py`` ``lookup_table`` builds ``utable`` by writing every row of the model's ``Wemb`` over
the regression's predictions under its word: the model's rows are stored as (dim_word,) arrays, the
predictions as (1, dim_word). ``uni_skip.npz`` also keeps ``Wemb``. So each ``Wemb`` row i appears, bit for
bit, as a (dim_word,) row of ``utable.npy``, and the word on that line of ``dictionary.txt`` is the word with
index i: the dictionary of the model's 20,000 words is recovered exactly (``<eos>`` = row 0 and ``UNK`` =
row 1 confirm the match). Word counts and words beyond ``n_words`` are not in the published files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lnserve.errors import shown

from .errors import CorruptFileError, TableMismatchError
from .legacy_files import open_npz, read_dictionary, visit_table_rows
from .vocab_pickle import SPECIAL_WORDS


@dataclass
class RecoveredDictionary:
    words: list[str]  # words[k] has index k + 2
    table_rows: int
    predicted_rows: int | None  # rows stored as (1, dim): None for a plain float table (shapes unknown)


def recover_uni_skip_dictionary(uni_dir: Path) -> RecoveredDictionary:
    """Match ``uni_skip.npz``'s ``Wemb`` rows against ``utable.npy`` in one memory-mapped pass."""
    npz_path, table_path, dict_path = (
        uni_dir / "uni_skip.npz",
        uni_dir / "utable.npy",
        uni_dir / "dictionary.txt",
    )
    with open_npz(npz_path) as npz:
        headers = npz.headers(["Wemb"])
        if "Wemb" not in headers:
            raise CorruptFileError(f"{npz_path}: no Wemb: the model's own word rows are needed")
        if len(headers["Wemb"].shape) != 2 or headers["Wemb"].dtype != np.float32:
            raise CorruptFileError(f"{npz_path}: Wemb is not a 2-d float32 array")
        wemb = npz.arrays(["Wemb"])["Wemb"]
    n_words = len(wemb)
    if n_words < 2:
        raise CorruptFileError(f"{npz_path}: Wemb has {n_words} rows; <eos> and UNK need two")
    by_bytes = {wemb[i].tobytes(): i for i in range(n_words)}
    if len(by_bytes) != n_words:
        raise CorruptFileError(f"{npz_path}: two Wemb rows are identical: their words cannot be told apart")
    words = read_dictionary(dict_path)
    found: dict[int, str] = {}
    predicted = 0
    shapes_known = True

    def visit(j: int, row: np.ndarray, ndim: int | None) -> None:
        nonlocal predicted, shapes_known
        if j >= len(words):
            raise TableMismatchError(f"{table_path}: more rows than dictionary.txt has lines ({len(words)})")
        if ndim is None:
            shapes_known = False
        elif ndim == 2:
            predicted += 1
            return
        i = by_bytes.get(row.tobytes())
        if i is None:
            if ndim == 1:
                raise TableMismatchError(
                    f"{table_path}: row {j} ({shown(words[j])!r}) is stored as a model row but matches no "
                    f"Wemb row of {npz_path.name}: the table was not built from this model"
                )
            return
        if i in found and found[i] != words[j]:
            raise TableMismatchError(
                f"{table_path}: Wemb row {i} appears under {shown(found[i])!r} and {shown(words[j])!r}"
            )
        found[i] = words[j]

    n_rows, dim = visit_table_rows(table_path, visit)
    if dim != wemb.shape[1]:
        raise TableMismatchError(f"{table_path}: rows have {dim} values, Wemb has {wemb.shape[1]}")
    if n_rows != len(words):
        raise TableMismatchError(f"{table_path}: {n_rows} rows but dictionary.txt has {len(words)} lines")
    missing = [i for i in range(n_words) if i not in found]
    if missing:
        raise TableMismatchError(
            f"{table_path}: {len(missing)} of the {n_words} Wemb rows are not in the table (first: row "
            f"{missing[0]}): the dictionary cannot be recovered exactly"
        )
    for i, special in enumerate(SPECIAL_WORDS):
        if found[i] != special:
            raise TableMismatchError(
                f"{table_path}: Wemb row {i} is stored under {shown(found[i])!r}, not {special!r}"
            )
    recovered = [found[i] for i in range(2, n_words)]
    clash = [w for w in recovered if w in SPECIAL_WORDS]
    if clash or len(set(recovered)) != len(recovered):
        raise TableMismatchError(f"{table_path}: a word takes more than one Wemb row")
    return RecoveredDictionary(recovered, n_rows, predicted if shapes_known else None)
