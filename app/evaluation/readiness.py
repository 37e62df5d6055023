"""Check a task's files (and the optional libraries it needs) before any model loads or sentence encodes."""

from __future__ import annotations

from pathlib import Path

from lnserve.extras import require

from . import datasets as ds

READERS = {
    "mr": lambda d: ds.read_binary(d, "mr"),
    "cr": lambda d: ds.read_binary(d, "cr"),
    "subj": lambda d: ds.read_binary(d, "subj"),
    "mpqa": lambda d: ds.read_binary(d, "mpqa"),
    "trec": ds.read_trec,
    "msrp": ds.read_msrp,
    "sick-r": lambda d: ds.read_sick(d, "sick-r"),
    "sick-e": lambda d: ds.read_sick(d, "sick-e"),
    "sts14": ds.read_sts14,
}


def check_task_files(task: str, directory: Path, *, fast: bool) -> None:
    READERS[task](directory)
    for module in needed_modules(task, fast=fast):
        require(module, "eval", f"task {task}" + (" --fast" if fast else ""))


def needed_modules(task: str, *, fast: bool) -> list[str]:
    """The optional libraries ``task`` imports: scipy's correlations (SICK-R, STS14), scikit-learn's
    liblinear (the faithful classifiers) or torch (SICK-R's softmax; every classifier in the fast mode)."""
    fits = task != "sts14"  # STS14 fits nothing: cosine against the gold scores
    needs = ["scipy"] if task in ("sick-r", "sts14") else []
    if task == "sick-r" or (fast and fits):
        needs.append("torch")
    elif fits:
        needs.append("sklearn")
    return needs
