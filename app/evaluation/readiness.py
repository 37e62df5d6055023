"""Check a task's files (and the optional libraries it needs) before any model loads or sentence encodes."""

from __future__ import annotations

from pathlib import Path

from lnserve.app.evaluation import datasets as ds
from lnserve.errors import UserInputError

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
    needs = ["scipy"] if task in ("sick-r", "sts14") else []  # correlations
    if not fast and task not in ("sick-r", "sts14"):
        needs.append("sklearn")  # liblinear (the fast mode fits with torch)
    for module in needs:
        try:
            __import__(module)
        except ImportError:
            raise UserInputError(
                f"task {task} needs {module}: pip install 'lnserve[eval]'"
                + ("" if fast else " (or try --fast, which fits with torch)")
            ) from None
