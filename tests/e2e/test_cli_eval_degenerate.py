"""``lnserve eval skip-thoughts`` on data that is well formed but degenerate, through the real CLI: one class,
constant gold scores, nothing left after the empty lines are skipped, non-finite gold, a training fold of one
class, a model that scores every pair alike. Every task: exit 2 and one line naming the file and the problem,
never an internal error and never a NaN in the results."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lnserve.app.demo_model.data import ensure_demo_artifact
from tests.conftest import run_cli
from tests.support import eval_sets


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return eval_sets.write_all(tmp_path_factory.mktemp("sets"), binary_n=40)


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode("latin-1").split("\n")[:-1]


def _write(path: Path, lines: list[str]) -> None:
    path.write_bytes("".join(line + "\n" for line in lines).encode("latin-1"))


def _column(name: str, col: int, value: str) -> Callable[[Path], None]:
    """Every data line of a tab-separated file (header kept) with column ``col`` set to ``value``."""

    def edit(data: Path) -> None:
        lines = _lines(data / name)
        rows = [line.split("\t") for line in lines[1:]]
        _write(data / name, [lines[0]] + ["\t".join([*r[:col], value, *r[col + 1 :]]) for r in rows])

    return edit


def _few_of_one_class(first: str, second: str) -> Callable[[Path], None]:
    """One line in ``first``, 30 in ``second``: enough items for 10 folds, but some training fold lacks the
    first class."""

    def edit(data: Path) -> None:
        _write(data / first, _lines(data / first)[:1])
        _write(data / second, _lines(data / second)[:30])

    return edit


def _replace(name: str, make: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def edit(data: Path) -> None:
        _write(data / name, make(_lines(data / name)))

    return edit


def _same_pair(data: Path) -> None:
    """Every pair of one STS set the same two words: the model scores them all alike (the gold varies)."""
    name = "STS.input.headlines.txt"
    _write(data / name, ["a red circle\ta red circle"] * len(_lines(data / name)))


def _all_empty(s: list[str]) -> list[str]:
    return [""] * len(s)


def _one_score(s: list[str]) -> list[str]:
    return ["2.5"] + [""] * (len(s) - 1)


def _all_desc(s: list[str]) -> list[str]:
    return ["DESC:manner " + line.split(" ", 1)[1] for line in s]


def _at(n: int, value: str) -> Callable[[list[str]], list[str]]:
    return lambda s: [*s[: n - 1], value, *s[n:]]


CASES = {  # id: (task, the file the message names, the edit, part of the message, --fast)
    "mr-one-class-fold": ("mr", "rt-polarity.pos", _few_of_one_class("rt-polarity.pos", "rt-polarity.neg"),
                          "holds one class only", False),
    "cr-none-left-after-empty-lines": ("cr", "custrev.pos", _replace("custrev.pos", lambda s: ["", " "] * 20),
                                       "no sentences", True),
    "subj-one-class-fold": ("subj", "quote.tok.gt9.5000",
                            _few_of_one_class("quote.tok.gt9.5000", "plot.tok.gt9.5000"),
                            "holds one class only", True),
    "mpqa-none-left-after-empty-lines": ("mpqa", "mpqa.neg", _replace("mpqa.neg", lambda s: [" "] * 30),
                                         "no sentences", True),
    "trec-one-class": ("trec", "train_5500.label", _replace("train_5500.label", _all_desc),
                       "have the label 'DESC'", False),
    "msrp-one-label": ("msrp", "msr_paraphrase_train.txt", _column("msr_paraphrase_train.txt", 0, "1"),
                       "have the label 1", True),
    "sick-r-constant-train": ("sick-r", "SICK_train.txt", _column("SICK_train.txt", 3, "3.0"),
                              "gold scores are 3: a correlation with a constant is undefined", True),
    "sick-r-constant-trial": ("sick-r", "SICK_trial.txt", _column("SICK_trial.txt", 3, "4.5"),
                              "gold scores are 4.5", True),
    "sick-e-one-class": ("sick-e", "SICK_train.txt", _column("SICK_train.txt", 4, "ENTAILMENT"),
                         "have the label 'ENTAILMENT'", False),
    "sts14-gold-all-empty": ("sts14", "STS.gs.images.txt", _replace("STS.gs.images.txt", _all_empty),
                             "no gold score (every line is empty)", True),
    "sts14-gold-one": ("sts14", "STS.gs.OnWN.txt", _replace("STS.gs.OnWN.txt", _one_score),
                       "only one gold score", True),
    "sts14-gold-constant": ("sts14", "STS.gs.deft-news.txt",
                            _replace("STS.gs.deft-news.txt", lambda s: ["3.2" if x else x for x in s]),
                            "gold scores are 3.2", True),
    "sts14-gold-nan": ("sts14", "STS.gs.tweet-news.txt", _replace("STS.gs.tweet-news.txt", _at(4, "nan")),
                       "line 4: 'nan' is not a finite number", True),
    "sts14-gold-inf": ("sts14", "STS.gs.deft-forum.txt", _replace("STS.gs.deft-forum.txt", _at(2, "-inf")),
                       "line 2: '-inf' is not a finite number", True),
    "sts14-model-scores-all-alike": ("sts14", "STS.input.headlines.txt", _same_pair,
                                     "the same cosine similarity", True),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_degenerate_data_is_one_line_naming_the_file(case: str, sets: Path, tmp_path: Path) -> None:
    task, name, edit, message, fast = CASES[case]
    data = tmp_path / "data"
    shutil.copytree(sets, data)
    edit(data)
    model = str(ensure_demo_artifact())
    args = ["eval", "skip-thoughts", "--model", model, "--task", task, "--data", str(data), "--json", "-"]
    proc = run_cli(*args, *(["--fast"] if fast else []))
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:], proc.stdout[-500:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith("lnserve: error [eval_data]: "), lines[0]
    assert str(data / name) in lines[0] and message in lines[0], lines[0]
    assert proc.stdout == ""  # no results, so no NaN among them
