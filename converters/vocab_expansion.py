"""Vocabulary expansion (spec §5.4, skip-thoughts ``training/tools.py`` ``lookup_table``): a linear map from
word2vec vectors into the model's word space, fit on the words both share, predicts a row for every other
word2vec word without ``_``; the model's own rows always stay its own.

Two streaming passes over the word2vec file: the first collects the fit set, plans which records get a
predicted row and hashes the file; the second predicts those rows block by block straight into the table.
Memory holds the fit set, one block and the set of words seen, never the 3.6 GB file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from .errors import ConversionError
from .word2vec import Word2VecHeader, iter_blocks

Progress = Callable[[int, int], None]
FIRST_WORD_ROW = 2  # rows 0 and 1 are <eos> and UNK: not worddict words, never in the fit


@dataclass
class LinearMap:
    """``x C + c`` in float64 (sklearn ``LinearRegression()`` defaults: OLS with an intercept)."""

    coef: np.ndarray  # (300, dim_word) float64
    intercept: np.ndarray  # (dim_word,) float64
    words_shared: int
    rank: int
    residual_rms: float
    residual_max_abs: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """float32 rows, as the original's ``clf.predict(...).astype('float32')``."""
        return (x.astype(np.float64) @ self.coef + self.intercept).astype(np.float32)

    def summary(self) -> dict[str, float | int | str]:
        return {
            "words_shared": self.words_shared,
            "rank": self.rank,
            "residual_rms": self.residual_rms,
            "residual_max_abs": self.residual_max_abs,
            "method": "ordinary least squares with intercept, float64 (sklearn LinearRegression defaults)",
        }


def fit_linear_map(x: np.ndarray, y: np.ndarray) -> LinearMap:
    """Least squares with an intercept: centre both sides, solve, recover the intercept (as sklearn does)."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    x_mean, y_mean = x64.mean(axis=0), y64.mean(axis=0)
    coef, _, rank, _ = np.linalg.lstsq(x64 - x_mean, y64 - y_mean, rcond=None)
    intercept = y_mean - x_mean @ coef
    residual = x64 @ coef + intercept - y64
    return LinearMap(
        coef=coef,
        intercept=intercept,
        words_shared=len(x),
        rank=int(rank),
        residual_rms=float(np.sqrt(np.mean(residual * residual))),
        residual_max_abs=float(np.abs(residual).max()),
    )


@dataclass
class ExpansionPlan:
    """What the first pass found."""

    fit_rows: np.ndarray  # model rows of the fit set, in worddict order
    fit_vectors: np.ndarray  # their word2vec vectors (float32, 300)
    predict: np.ndarray  # bool per word2vec record: gets a predicted row
    words: list[str]  # the words of those records, in file order
    duplicates: int  # records whose word appeared earlier (gensim keeps the first)
    sha256: str


def plan_expansion(
    header: Word2VecHeader, model_rows: Mapping[str, int], *, progress: Progress | None = None
) -> ExpansionPlan:
    """Pass 1. The fit set is every worddict word of the model (row >= 2) that word2vec has, with no ``_``
    filter; a predicted row goes to every other word2vec word without ``_`` (first occurrence only)."""
    digest = hashlib.sha256()
    seen: set[str] = set()
    fit: dict[int, np.ndarray] = {}
    masks: list[np.ndarray] = []
    words: list[str] = []
    duplicates = 0
    for block in iter_blocks(header, digest=digest, progress=progress):
        mask = np.zeros(len(block.words), dtype=bool)
        for j, word in enumerate(block.words):
            if word in seen:
                duplicates += 1
                continue
            seen.add(word)
            row = model_rows.get(word)
            if row is not None:
                if row >= FIRST_WORD_ROW:
                    fit[row] = block.vectors[j].copy()
            elif "_" not in word:
                mask[j] = True
                words.append(word)
        masks.append(mask)
    del seen
    if not fit:
        raise ConversionError(
            f"{header.path}: no word of the model's vocabulary has a word2vec vector: nothing to fit the "
            "expansion on (is this the right word2vec file?)"
        )
    rows = np.array(sorted(fit), dtype=np.int64)
    vectors = np.stack([fit[r] for r in rows])
    return ExpansionPlan(rows, vectors, np.concatenate(masks), words, duplicates, digest.hexdigest())


def write_predictions(
    header: Word2VecHeader,
    plan: ExpansionPlan,
    linear_map: LinearMap,
    out: BinaryIO,
    *,
    progress: Progress | None = None,
) -> int:
    """Pass 2: the predicted rows, in file order, appended to ``out`` as float32; returns how many."""
    written = 0
    for block in iter_blocks(header, progress=progress):
        take = plan.predict[block.first : block.first + len(block.words)]
        if take.any():
            rows = linear_map.predict(block.vectors[take])
            out.write(np.ascontiguousarray(rows, dtype="<f4").tobytes())
            written += len(rows)
    if written != len(plan.words):  # the file changed between the passes
        raise ConversionError(f"{header.path}: changed while it was being read; convert again")
    return written
