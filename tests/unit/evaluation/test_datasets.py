"""The readers on files written in each set's distribution format, and their one-line refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lnserve.app.evaluation import datasets as ds
from lnserve.app.evaluation.errors import EvalDataError
from tests.support import eval_sets, hostile_files


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return eval_sets.write_all(tmp_path_factory.mktemp("sets"))


def test_mr_decodes_latin1_strips_and_labels_positives_first(data: Path) -> None:
    b = ds.read_binary(data, "mr")
    pos = (data / "rt-polarity.pos").read_bytes().decode("latin-1").splitlines()
    assert b.texts[3] == pos[3].strip() and b.texts[3].endswith("caf\u00e9")
    assert len(b.texts) == 120 + 127
    assert b.labels[:120].tolist() == [1.0] * 120 and b.labels[120:].tolist() == [0.0] * 127


@pytest.mark.parametrize("task", ["cr", "mpqa"])
def test_cr_and_mpqa_skip_empty_lines(data: Path, task: str) -> None:
    b = ds.read_binary(data, task)
    assert len(b.texts) == 120 + 127 and all(b.texts)


def test_trec_coarse_label_and_text(data: Path) -> None:
    t = ds.read_trec(data)
    first = (data / "train_5500.label").read_text(encoding="latin-1").splitlines()[0]
    assert t.train_labels[0] == first.split()[0].split(":")[0] == "DESC"
    assert t.train_texts[0] == " ".join(first.split()[1:])
    assert set(t.test_labels) == set(eval_sets.TREC_COARSE)


def test_msrp_skips_header_and_bom(data: Path) -> None:
    train, test = ds.read_msrp(data)
    assert len(train.y) == 120 and len(test.y) == 50
    assert set(np.unique(train.y)) == {0, 1}
    raw = (data / "msr_paraphrase_train.txt").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfQuality")
    assert train.a[0] == raw.decode("utf-8-sig").splitlines()[1].split("\t")[3]


def test_sick_relatedness_and_entailment_columns(data: Path) -> None:
    r_train, r_trial, r_test = ds.read_sick(data, "sick-r")
    e_train, _, _ = ds.read_sick(data, "sick-e")
    assert (len(r_train.y), len(r_trial.y), len(r_test.y)) == (200, 60, 120)
    assert r_train.y.dtype == np.float64 and r_train.y.min() >= 1.0 and r_train.y.max() <= 5.0
    assert set(e_train.y.tolist()) <= {0, 1, 2} and r_train.a == e_train.a


def test_sts14_drops_pairs_without_gold(data: Path) -> None:
    sets = ds.read_sts14(data)
    assert list(sets) == list(ds.STS14_SETS)
    assert all(len(p.y) == 39 for p in sets.values())  # line 8 has no score


@pytest.mark.parametrize(
    ("task", "missing"),
    [
        ("mr", "rt-polarity.neg"),
        ("subj", "plot.tok.gt9.5000"),
        ("trec", "TREC_10.label"),
        ("msrp", "msr_paraphrase_test.txt"),
        ("sick-r", "SICK_trial.txt"),
        ("sts14", "STS.gs.OnWN.txt"),
    ],
)
def test_missing_file_names_the_expected_file(data: Path, tmp_path: Path, task: str, missing: str) -> None:
    for f in data.iterdir():
        if f.name != missing:
            (tmp_path / f.name).write_bytes(f.read_bytes())
    from lnserve.app.evaluation.readiness import check_task_files

    with pytest.raises(EvalDataError) as err:
        check_task_files(task, tmp_path, fast=False)
    msg = str(err.value)
    assert missing in msg and "\n" not in msg and err.value.exit_code == 2


@pytest.mark.parametrize(
    ("name", "content", "task", "needle"),
    [
        ("train_5500.label", b"How far is it ?\n", "trec", "COARSE:fine"),
        ("msr_paraphrase_train.txt", b"1\t1\t2\ta\tb\n", "msrp", "header"),
        (
            "msr_paraphrase_train.txt",
            b"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n2\t1\t2\ta\tb\n",
            "msrp",
            "line 2",
        ),
        (
            "SICK_train.txt",
            (eval_sets.SICK_HEADER + "\n1\ta\tb\t7.5\tNEUTRAL\n").encode(),
            "sick-r",
            "[1, 5]",
        ),
        ("SICK_train.txt", (eval_sets.SICK_HEADER + "\n1\ta\tb\t3.5\tMAYBE\n").encode(), "sick-e", "MAYBE"),
        ("rt-polarity.pos", b"\n\n", "mr", "no sentences"),
        ("STS.input.images.txt", b"only one sentence\n", "sts14", "sentence1<TAB>sentence2"),
    ],
)
def test_malformed_file_is_one_line_naming_it(
    data: Path, tmp_path: Path, name: str, content: bytes, task: str, needle: str
) -> None:
    for f in data.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / name).write_bytes(content)
    from lnserve.app.evaluation.readiness import check_task_files

    with pytest.raises(EvalDataError) as err:
        check_task_files(task, tmp_path, fast=False)
    assert name in str(err.value) and needle in str(err.value) and "\n" not in str(err.value)


TASK_FILES = [(task, name) for task, names in ds.TASK_FILES.items() for name in names]


@pytest.mark.parametrize("kind", hostile_files.KINDS)
@pytest.mark.parametrize(("task", "name"), TASK_FILES, ids=[f"{t}:{n}" for t, n in TASK_FILES])
def test_every_set_file_refuses_hostile_files(
    data: Path, tmp_path: Path, task: str, name: str, kind: str
) -> None:
    """Each file of each task: a FIFO, /dev/zero, a directory, one line over the bound, a file over the size
    bound; refused within seconds, naming the file, before any model is loaded."""
    from lnserve.app.evaluation.readiness import check_task_files

    for f in data.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    bad = tmp_path / name
    hostile_files.make(kind, bad, max_bytes=ds.MAX_FILE_BYTES, max_line_bytes=ds.MAX_LINE_BYTES, pad=True)
    exc = hostile_files.raised_within(10, lambda: check_task_files(task, tmp_path, fast=True), bad)
    assert isinstance(exc, EvalDataError), exc
    assert str(exc).startswith(f"{bad}: ") and "\n" not in str(exc)
