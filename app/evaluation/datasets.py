"""Readers for each evaluation set's original distribution files, under their original names.

Each reader follows the original loader line for line (``dataset_handler.py``, ``eval_trec.py``,
``eval_msrp.py``, ``eval_sick.py``; SentEval's ``sick.py`` and ``sts.py``): the same decoding, stripping,
header skipping and label syntax. A missing or malformed file is one ``EvalDataError`` (``eval_data``, a
UserInputError: one line on the CLI, exit 2) naming the file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lnserve.input_files import read_bounded

from .errors import EvalDataError

STS14_SETS = ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")
SICK_FILES = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")
SICK_HEADER = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment")
ENTAILMENT_IDS = {"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}  # SentEval's label2id
# The largest distribution file (MSRP train) is about 1 MB and its longest line under 1 KB: the bounds leave
# room for any real set and keep a crafted one (``/dev/zero``, one 200 MB line) from taking the machine.
MAX_FILE_BYTES = 64 << 20
MAX_LINE_BYTES = 64 << 10
MSRP_HEADER_FIELDS = 5  # Quality, #1 ID, #2 ID, #1 String, #2 String
BINARY_FILES = {
    "mr": ("rt-polarity.pos", "rt-polarity.neg"),
    "cr": ("custrev.pos", "custrev.neg"),
    "subj": ("plot.tok.gt9.5000", "quote.tok.gt9.5000"),
    "mpqa": ("mpqa.pos", "mpqa.neg"),
}

TASK_FILES = {
    **BINARY_FILES,
    "trec": ("train_5500.label", "TREC_10.label"),
    "msrp": ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt"),
    "sick-r": SICK_FILES,
    "sick-e": SICK_FILES,
    "sts14": tuple(f"STS.{kind}.{name}.txt" for name in STS14_SETS for kind in ("input", "gs")),
}


@dataclass(frozen=True)
class Binary:
    """MR/CR/SUBJ/MPQA: texts as the loader returns them (positives first) and labels (1 = first file)."""

    texts: list[str]
    labels: np.ndarray


@dataclass(frozen=True)
class Labelled:
    """TREC: question texts and coarse labels (strings), train and test."""

    train_texts: list[str]
    train_labels: list[str]
    test_texts: list[str]
    test_labels: list[str]


@dataclass(frozen=True)
class Pairs:
    """Sentence pairs with one target each (a score or a class id)."""

    a: list[str]
    b: list[str]
    y: np.ndarray


def _read(directory: Path, name: str, task: str) -> bytes:
    """The file's bytes, read as hostile input (``read_bounded``): a regular file (or a symlink to one) of
    at most ``MAX_FILE_BYTES`` with no line over ``MAX_LINE_BYTES``."""
    path = directory / name
    if not os.path.lexists(path):
        raise EvalDataError(
            f"{path}: missing; task {task} reads its original distribution file {name!r} from --data"
        )
    return read_bounded(path, max_bytes=MAX_FILE_BYTES, max_line_bytes=MAX_LINE_BYTES, error=EvalDataError)


def _lines(data: bytes, encoding: str) -> list[str]:
    """Lines as Python 2's ``for line in open(f, 'rb')`` gives them, decoded (bytes kept as latin-1 when
    the text is not UTF-8, as the byte strings of the original never failed)."""
    if encoding == "utf-8":
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    else:
        text = data.decode(encoding)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _bad(directory: Path, name: str, task: str, why: str) -> EvalDataError:
    return EvalDataError(f"{directory / name}: not the {task} distribution file {name!r}: {why}")


def _two_classes(directory: Path, name: str, task: str, labels: Sequence[object]) -> None:
    """A training file needs two classes at least: with one there is nothing to fit (liblinear refuses)."""
    if len(set(labels)) < 2:
        raise _bad(
            directory,
            name,
            task,
            f"all {len(labels)} items have the label {labels[0]!r}; training needs two classes at least",
        )


def _varying_scores(directory: Path, name: str, task: str, y: Sequence[float]) -> None:
    """Gold scores a correlation can be computed against: two at least, and not all equal."""
    if len(y) < 2:
        have = "only one gold score" if y else "no gold score (every line is empty)"
        raise _bad(directory, name, task, f"{have}; a correlation needs two at least")
    if min(y) == max(y):
        raise _bad(
            directory,
            name,
            task,
            f"all {len(y)} gold scores are {y[0]:g}: a correlation with a constant is undefined",
        )


def read_binary(directory: Path, task: str) -> Binary:
    """``dataset_handler.load_*``: MR and SUBJ decode latin-1 and keep every stripped line; CR and MPQA
    keep the non-empty stripped lines."""
    pos_name, neg_name = BINARY_FILES[task]
    encoding = "latin-1" if task in ("mr", "subj") else "utf-8"
    keep_empty = task in ("mr", "subj")
    sides = []
    for name in (pos_name, neg_name):
        lines = [s.strip() for s in _lines(_read(directory, name, task), encoding)]
        if not keep_empty:
            lines = [s for s in lines if s]
        if not any(lines):
            raise _bad(directory, name, task, "no sentences (one sentence per line expected)")
        sides.append(lines)
    pos, neg = sides
    labels = np.zeros(len(pos) + len(neg))
    labels[: len(pos)] = 1.0
    return Binary(pos + neg, labels)


def _trec_file(directory: Path, name: str) -> tuple[list[str], list[str]]:
    """``eval_trec.prepare_data``: the first token's part before ':' is the coarse label."""
    texts, labels = [], []
    for n, raw in enumerate(_lines(_read(directory, name, "trec"), "latin-1"), 1):
        line = raw.strip()
        head, _, rest = line.partition(" ")
        coarse, colon, fine = head.partition(":")
        if not (coarse and colon and fine):
            raise _bad(
                directory, name, "trec", f"line {n} does not start with COARSE:fine (e.g. 'DESC:manner')"
            )
        labels.append(coarse)
        texts.append(" ".join(rest.split()))
    if not texts:
        raise _bad(directory, name, "trec", "no questions")
    return texts, labels


def read_trec(directory: Path) -> Labelled:
    train_texts, train_labels = _trec_file(directory, "train_5500.label")
    _two_classes(directory, "train_5500.label", "trec", train_labels)
    test_texts, test_labels = _trec_file(directory, "TREC_10.label")
    return Labelled(train_texts, train_labels, test_texts, test_labels)


def _msrp_file(directory: Path, name: str) -> Pairs:
    """``eval_msrp.load_data``: tab-separated, header skipped, label in column 0, strings in 3 and 4
    (Treebank-tokenised there; the protocol does that, not the reader)."""
    lines = _lines(_read(directory, name, "msrp"), "utf-8")
    if (
        not lines
        or len(lines[0].strip().split("\t")) != MSRP_HEADER_FIELDS
        or not lines[0].startswith("Quality")
    ):
        raise _bad(
            directory, name, "msrp", "first line must be the header 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>...'"
        )
    a, b, y = [], [], []
    for n, raw in enumerate(lines[1:], 2):
        fields = raw.strip().split("\t")
        if len(fields) < MSRP_HEADER_FIELDS or fields[0] not in ("0", "1"):
            raise _bad(
                directory, name, "msrp", f"line {n}: expected 'label<TAB>id<TAB>id<TAB>s1<TAB>s2', label 0/1"
            )
        y.append(int(fields[0]))
        a.append(fields[3])
        b.append(fields[4])
    if not y:
        raise _bad(directory, name, "msrp", "no sentence pairs after the header")
    return Pairs(a, b, np.array(y))


def read_msrp(directory: Path) -> tuple[Pairs, Pairs]:
    train = _msrp_file(directory, "msr_paraphrase_train.txt")
    _two_classes(directory, "msr_paraphrase_train.txt", "msrp", train.y.tolist())
    return train, _msrp_file(directory, "msr_paraphrase_test.txt")


def _sick_file(directory: Path, name: str, task: str) -> Pairs:
    """``eval_sick.load_data`` (relatedness, column 3) or SentEval's SICK-E ``loadFile`` (column 4)."""
    lines = _lines(_read(directory, name, task), "utf-8")
    if not lines or tuple(lines[0].strip().split("\t")[:5]) != SICK_HEADER:
        raise _bad(directory, name, task, f"first line must be the header {'<TAB>'.join(SICK_HEADER)}")
    a, b, y = [], [], []
    judgments = []
    for n, raw in enumerate(lines[1:], 2):
        fields = raw.strip().split("\t")
        if len(fields) < len(SICK_HEADER):
            raise _bad(directory, name, task, f"line {n}: expected {len(SICK_HEADER)} tab-separated fields")
        if task == "sick-r":
            try:
                score = float(fields[3])
            except ValueError:
                score = float("nan")
            if not 1.0 <= score <= 5.0:
                raise _bad(
                    directory, name, task, f"line {n}: relatedness {fields[3]!r} is not a number in [1, 5]"
                )
            y.append(score)
        else:
            if fields[4] not in ENTAILMENT_IDS:
                raise _bad(
                    directory,
                    name,
                    task,
                    f"line {n}: entailment {fields[4]!r} is not one of {', '.join(ENTAILMENT_IDS)}",
                )
            y.append(ENTAILMENT_IDS[fields[4]])
            judgments.append(fields[4])
        a.append(fields[1])
        b.append(fields[2])
    if not y:
        raise _bad(directory, name, task, "no sentence pairs after the header")
    if task == "sick-r":  # trained on, and correlated with: every file must vary
        _varying_scores(directory, name, task, y)
    elif name == SICK_FILES[0]:
        _two_classes(directory, name, task, judgments)
    return Pairs(a, b, np.array(y, dtype=np.float64 if task == "sick-r" else np.int64))


def read_sick(directory: Path, task: str) -> tuple[Pairs, Pairs, Pairs]:
    """train, trial (dev), test."""
    train, trial, test = (_sick_file(directory, name, task) for name in SICK_FILES)
    return train, trial, test


def read_sts14(directory: Path) -> dict[str, Pairs]:
    """SentEval's ``STSEval.loadFile``: ``STS.input.<set>.txt`` (s1 TAB s2) beside ``STS.gs.<set>.txt``;
    pairs with an empty gold score are dropped."""
    out = {}
    for name in STS14_SETS:
        inp, gs = f"STS.input.{name}.txt", f"STS.gs.{name}.txt"
        pairs = [
            line.split("\t")
            for line in _read(directory, inp, "sts14").decode("utf-8", "replace").splitlines()
        ]
        scores = _read(directory, gs, "sts14").decode("utf-8", "replace").splitlines()
        if any(len(p) != 2 for p in pairs) or not pairs:
            raise _bad(directory, inp, "sts14", "every line must be 'sentence1<TAB>sentence2'")
        if len(scores) != len(pairs):
            raise _bad(directory, gs, "sts14", f"{len(scores)} scores for {len(pairs)} pairs in {inp}")
        a, b, y = [], [], []
        for n, ((s1, s2), raw) in enumerate(zip(pairs, scores, strict=True), 1):
            if raw == "":
                continue
            try:
                score = float(raw)
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                raise _bad(directory, gs, "sts14", f"line {n}: {raw!r} is not a finite number")
            y.append(score)
            a.append(" ".join(s1.split()))
            b.append(" ".join(s2.split()))
        _varying_scores(directory, gs, "sts14", y)  # those left once the empty lines are skipped
        out[name] = Pairs(a, b, np.array(y))
    return out
