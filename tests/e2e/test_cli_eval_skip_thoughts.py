"""``lnserve eval skip-thoughts`` through the real CLI (subprocesses) on synthetic sets in each set's
distribution format: every task runs, MR and TREC equal the original protocol re-run with scikit-learn's
liblinear on the same vectors, bad data is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lnserve.app.demo_model.data import ensure_demo_artifact
from lnserve.app.evaluation.datasets import read_binary, read_trec
from lnserve.app.evaluation.folds import shuffled_order
from lnserve.app.evaluation.report import PUBLISHED
from lnserve.app.runtime.engine import Engine
from tests.conftest import run_cli
from tests.support import eval_sets
from tests.support import skipthoughts_reference as ref

ALL = "sick-r,sick-e,mr,cr,subj,mpqa,trec,msrp,sts14"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return eval_sets.write_all(tmp_path_factory.mktemp("sets"), binary_n=50)


@pytest.fixture(scope="module")
def demo() -> Path:
    return ensure_demo_artifact()


@pytest.fixture(scope="module")
def faithful(data: Path, demo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    out = tmp_path_factory.mktemp("out") / "eval.json"
    proc = run_cli(
        "eval",
        "skip-thoughts",
        "--model",
        str(demo),
        "--task",
        ALL,
        "--data",
        str(data),
        "--json",
        str(out),
        check=True,
    )
    return json.loads(out.read_text(encoding="utf-8")), proc.stdout


def test_every_task_runs_and_the_table_sits_beside_the_published_rows(faithful: tuple[Any, str]) -> None:
    report, table = faithful
    assert set(report["tasks"]) == set(ALL.split(","))
    assert report["mode"] == "faithful" and report["seed"] == 1234
    assert "faithful protocol, seed 1234" in table.splitlines()[0]
    mr_row = next(line for line in table.splitlines() if line.startswith("MR acc %"))
    assert mr_row.split()[-2:] == ["76.5", "79.4"]  # combine-skip, LN skip-thoughts
    tasks = report["tasks"]
    for task in ("mr", "cr", "subj", "mpqa"):  # the colours decide the class: known to be learnable
        assert tasks[task]["acc"] >= 90, (task, tasks[task])
    assert tasks["msrp"]["acc"] >= 90 and tasks["trec"]["acc"] >= 80
    assert tasks["sick-r"]["r"] > 0.5 and tasks["sts14"]["pearson"] > 0.3 and tasks["sick-e"]["acc"] > 50
    assert len(tasks["mr"]["fold_acc"]) == 10 and all(
        c in [2.0**t for t in range(9)] for c in tasks["mr"]["C"]
    )


@pytest.mark.parametrize("columns", [80, 120])
def test_the_table_fits_the_terminal_and_names_each_published_row_in_full(
    data: Path, demo: Path, columns: int
) -> None:
    """The published rows' headers were cut to 30 characters (``combine-skip (skip-thoughts pa``)."""
    cli = [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()"]
    proc = subprocess.run(
        [*cli, "eval", "skip-thoughts", "--model", str(demo), "--task", "mr", "--data", str(data), "--fast"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": str(columns)},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines), [line for line in lines if len(line) > columns]
    for name in PUBLISHED:  # each one's full name, on one line
        assert any(line.endswith(f"] {name}") for line in lines), (name, proc.stdout)
    head = next(line for line in lines if line.startswith("metric"))
    assert len(head) <= 80 and "[1]" in head and "[2]" in head, head
    mr_row = next(line for line in lines if line.startswith("MR acc %"))
    assert mr_row.split()[-2:] == ["76.5", "79.4"] and len(mr_row) <= 80


def _vectors(demo: Path, texts: list[str], eos: bool) -> np.ndarray:
    return Engine.open(demo).encode_sentences(texts, eos=eos)


def test_mr_equals_the_original_protocol_with_liblinear(
    faithful: tuple[Any, str], data: Path, demo: Path
) -> None:
    b = read_binary(data, "mr")
    texts, labels = ref.shuffle_data(b.texts, b.labels)
    expected = 100 * float(np.mean(ref.eval_nested_kfold(_vectors(demo, texts, eos=False), labels)))
    assert abs(faithful[0]["tasks"]["mr"]["acc"] - expected) <= 0.25


def test_trec_equals_the_original_protocol_with_liblinear(
    faithful: tuple[Any, str], data: Path, demo: Path
) -> None:
    t = read_trec(data)
    names = sorted(set(t.train_labels))
    ytr = np.array([names.index(s) for s in t.train_labels])
    yte = np.array([names.index(s) for s in t.test_labels])
    order = shuffled_order(len(ytr), 1234)
    train_f = _vectors(demo, [t.train_texts[i] for i in order], eos=False)
    expected = 100 * ref.trec_evaluate(train_f, ytr[order], _vectors(demo, t.test_texts, eos=False), yte)
    assert abs(faithful[0]["tasks"]["trec"]["acc"] - expected) <= 0.25


def test_fast_mode_runs_and_says_so(data: Path, demo: Path) -> None:
    proc = run_cli(
        "eval",
        "skip-thoughts",
        "--model",
        str(demo),
        "--task",
        "mr,trec,sick-e",
        "--data",
        str(data),
        "--fast",
        "--json",
        "-",
        check=True,
    )
    report = json.loads(proc.stdout)
    assert report["mode"] == "fast" and "fast" in report["protocols"]
    assert report["tasks"]["mr"]["acc"] >= 90 and report["tasks"]["trec"]["acc"] >= 80


def test_a_skip_thoughts_artifact_runs_with_eos_for_sick(data: Path, artifacts: dict[str, Path]) -> None:
    proc = run_cli(
        "eval",
        "skip-thoughts",
        "--model",
        str(artifacts["skipthoughts_lngru"]),
        "--task",
        "sick-r,mpqa",
        "--data",
        str(data),
        "--fast",
        "--json",
        "-",
        check=True,
    )
    report = json.loads(proc.stdout)
    assert np.isfinite(report["tasks"]["sick-r"]["mse"]) and 0 <= report["tasks"]["mpqa"]["acc"] <= 100


@pytest.mark.parametrize(
    ("remove", "task"),
    [
        ("rt-polarity.pos", "mr"),
        ("train_5500.label", "trec"),
        ("SICK_test_annotated.txt", "sick-r"),
        ("STS.input.headlines.txt", "sts14"),
    ],
)
def test_missing_file_is_one_line_and_exit_2(
    data: Path, demo: Path, tmp_path: Path, remove: str, task: str
) -> None:
    for f in data.iterdir():
        if f.name != remove:
            (tmp_path / f.name).write_bytes(f.read_bytes())
    proc = run_cli("eval", "skip-thoughts", "--model", str(demo), "--task", task, "--data", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lnserve: error [eval_data]: ") and remove in lines[0]


def test_unknown_task_and_missing_data_dir(demo: Path, tmp_path: Path) -> None:
    proc = run_cli(
        "eval", "skip-thoughts", "--model", str(demo), "--task", "mr,sst2", "--data", str(tmp_path)
    )
    assert proc.returncode == 2 and "'sst2'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli(
        "eval", "skip-thoughts", "--model", str(demo), "--task", "mr", "--data", str(tmp_path / "no")
    )
    assert proc.returncode == 2 and "not a directory" in proc.stderr


def test_a_set_too_small_for_ten_folds_is_bad_data(demo: Path, tmp_path: Path) -> None:
    for name in ("train_5500.label", "TREC_10.label"):
        (tmp_path / name).write_bytes(b"DESC:manner how is it ?\nNUM:count how many are there ?\n")
    proc = run_cli("eval", "skip-thoughts", "--model", str(demo), "--task", "trec", "--data", str(tmp_path))
    assert proc.returncode == 2 and "10 folds" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
