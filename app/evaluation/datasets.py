"""Readers for each evaluation set's original distribution files, under their original names.

Each reader follows the original loader line for line (``dataset_handler.py``, ``eval_trec.py``,
``eval_msrp.py``, ``eval_sick.py``; SentEval's ``sick.py`` and ``sts.py``): the same decoding, stripping,
header skipping and label syntax. A missing or malformed file is one ``EvalDataError`` (``eval_data``, a
UserInputError: one line on the CLI, exit 2) naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lnserve.errors import UserInputError

STS14_SETS = ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")
SICK_FILES = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")
SICK_HEADER = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment")
ENTAILMENT_IDS = {"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}  # SentEval's label2id
MSRP_HEADER_FIELDS = 5  # Quality, #1 ID, #2 ID, #1 String, #2 String
BINARY_FILES = {
    "mr": ("rt-polarity.pos", "rt-polarity.neg"),
    "cr": ("custrev.pos", "custrev.neg"),
    "subj": ("plot.tok.gt9.5000", "quote.tok.gt9.5000"),
    "mpqa": ("mpqa.pos", "mpqa.neg"),
}


class EvalDataError(UserInputError):
    """An evaluation set's file is missing or not in its distribution format."""

    code = "eval_data"


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
    path = directory / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise EvalDataError(
            f"{path}: missing; task {task} reads its original distribution file {name!r} from --data"
        ) from None
    except OSError as exc:
        raise EvalDataError(f"{path}: cannot read {task} file {name!r} ({exc.strerror})") from None


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
    return _msrp_file(directory, "msr_paraphrase_train.txt"), _msrp_file(directory, "msr_paraphrase_test.txt")


def _sick_file(directory: Path, name: str, task: str) -> Pairs:
    """``eval_sick.load_data`` (relatedness, column 3) or SentEval's SICK-E ``loadFile`` (column 4)."""
    lines = _lines(_read(directory, name, task), "utf-8")
    if not lines or tuple(lines[0].strip().split("\t")[:5]) != SICK_HEADER:
        raise _bad(directory, name, task, f"first line must be the header {'<TAB>'.join(SICK_HEADER)}")
    a, b, y = [], [], []
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
        a.append(fields[1])
        b.append(fields[2])
    if not y:
        raise _bad(directory, name, task, "no sentence pairs after the header")
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
                y.append(float(raw))
            except ValueError:
                raise _bad(directory, gs, "sts14", f"line {n}: {raw!r} is not a number") from None
            a.append(" ".join(s1.split()))
            b.append(" ".join(s2.split()))
        out[name] = Pairs(a, b, np.array(y))
    return out
