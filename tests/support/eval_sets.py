"""Small synthetic evaluation sets written in each set's exact distribution format (names, encodings,
headers, tab layout, label syntax), in the demo model's world of coloured shapes so its vectors separate
the classes: positive / first-class lines use one group of colours, negative lines the other.

``write_all(directory)`` writes every task's files; each ``write_*`` returns nothing and writes bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

WARM = ("red", "orange", "yellow", "purple")
COOL = ("blue", "green", "black", "white")
SHAPES = ("circle", "square", "triangle", "star", "diamond", "cross")
PLACES = ("on the left", "on the right", "at the top", "at the bottom", "in the middle")
TREC_COARSE = ("DESC", "ENTY", "ABBR", "HUM", "LOC", "NUM")
TREC_FINE = {"DESC": "manner", "ENTY": "animal", "ABBR": "exp", "HUM": "ind", "LOC": "city", "NUM": "count"}
SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
STS14_SETS = ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")


def sentence(rng: np.random.Generator, colours: tuple[str, ...]) -> str:
    return f"a {rng.choice(colours)} {rng.choice(SHAPES)} {rng.choice(PLACES)}"


def _write(path: Path, lines: list[str], encoding: str = "utf-8", bom: bool = False) -> None:
    data = "".join(line + "\n" for line in lines).encode(encoding)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)


def write_binary(directory: Path, n: int = 120, seed: int = 0) -> None:
    """MR (latin-1, one byte above 127), SUBJ (latin-1), CR and MPQA (empty lines are skipped there)."""
    rng = np.random.default_rng(seed)
    for pos_name, neg_name, enc in (
        ("rt-polarity.pos", "rt-polarity.neg", "latin-1"),
        ("plot.tok.gt9.5000", "quote.tok.gt9.5000", "latin-1"),
        ("custrev.pos", "custrev.neg", "utf-8"),
        ("mpqa.pos", "mpqa.neg", "utf-8"),
    ):
        pos = [sentence(rng, WARM) for _ in range(n)]
        neg = [sentence(rng, COOL) for _ in range(n + 7)]
        pos[3] += " caf\u00e9 "  # a latin-1 byte (0xe9) in rt-polarity; trailing space is stripped
        if enc == "utf-8":
            pos.insert(5, "")
            neg.insert(9, "   ")
        _write(directory / pos_name, pos, enc)
        _write(directory / neg_name, neg, enc)


def trec_line(rng: np.random.Generator, label: str) -> str:
    i = TREC_COARSE.index(label)
    colours = ((WARM + COOL)[i],)
    shape = f"{rng.choice(colours)} {rng.choice(SHAPES)} {rng.choice(PLACES)}"
    return f"{label}:{TREC_FINE[label]} is there a {shape} ?"


def write_trec(directory: Path, n_train: int = 180, n_test: int = 60, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    for name, n in (("train_5500.label", n_train), ("TREC_10.label", n_test)):
        labels = [TREC_COARSE[i % len(TREC_COARSE)] for i in range(n)]
        _write(directory / name, [trec_line(rng, lab) for lab in labels], "latin-1")


def write_msrp(directory: Path, n_train: int = 120, n_test: int = 50, seed: int = 2) -> None:
    """Tab layout with the header and a UTF-8 byte-order mark, as the Microsoft release; label 1 when the
    second sentence repeats the first (numbers included, for the six number features)."""
    rng = np.random.default_rng(seed)
    for name, n in (("msr_paraphrase_train.txt", n_train), ("msr_paraphrase_test.txt", n_test)):
        lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(n):
            a = sentence(rng, WARM) + f" {int(rng.integers(2, 9))}"
            same = i % 3 != 0
            b = a if same else sentence(rng, COOL) + " 11"
            lines.append(f"{int(same)}\t{1000 + i}\t{2000 + i}\t{a}\t{b}")
        _write(directory / name, lines, bom=True)


def sick_pair(rng: np.random.Generator) -> tuple[str, str, float, str]:
    a = sentence(rng, WARM + COOL)
    kind = int(rng.integers(0, 3))
    if kind == 0:
        return a, a, 5.0, "ENTAILMENT"
    words = a.split()
    if kind == 1:
        words[1] = str(rng.choice([c for c in WARM + COOL if c != words[1]]))
        return a, " ".join(words), round(float(rng.uniform(2.5, 3.5)), 1), "CONTRADICTION"
    return a, sentence(rng, WARM + COOL), round(float(rng.uniform(1.0, 1.9)), 1), "NEUTRAL"


def write_sick(directory: Path, sizes: tuple[int, int, int] = (200, 60, 120), seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    pair_id = 1
    for name, n in zip(("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"), sizes, strict=True):
        lines = [SICK_HEADER]
        for _ in range(n):
            a, b, score, ent = sick_pair(rng)
            lines.append(f"{pair_id}\t{a}\t{b}\t{score}\t{ent}")
            pair_id += 1
        _write(directory / name, lines)


def write_sts14(directory: Path, n: int = 40, seed: int = 4) -> None:
    """``STS.input.<set>.txt`` (s1 TAB s2) and ``STS.gs.<set>.txt`` (one score a line, some empty)."""
    rng = np.random.default_rng(seed)
    for name in STS14_SETS:
        pairs, gold = [], []
        for i in range(n):
            a, b, score, _ = sick_pair(rng)
            pairs.append(f"{a}\t{b}")
            gold.append("" if i == 7 else f"{score - 1:.3f}")
        _write(directory / f"STS.input.{name}.txt", pairs)
        _write(directory / f"STS.gs.{name}.txt", gold)


def write_all(directory: Path, binary_n: int = 120) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_binary(directory, n=binary_n)
    write_trec(directory)
    write_msrp(directory)
    write_sick(directory)
    write_sts14(directory)
    return directory
