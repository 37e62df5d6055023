"""Every CLI flag that names a place to write, given a place where nothing can be written (issue 30,
finding 11): under a regular file, inside ``/proc``, a FIFO (a rename would replace it: ``/dev/null`` when
run as root), a read-only directory, a directory where a file is expected.

Each must be refused before any work with one line, ``lnserve: error [invalid_input]: FLAG PATH: ...``, and
exit 2, creating nothing. The unfixed CLI answered "internal error" (exit 1) for ``dictionary recover``
under a file, for every directory output inside ``/proc``, and silently replaced a FIFO given to
``encode``, ``score`` or ``eval --json`` with a regular file.
"""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from tests.conftest import LEGACY, run_cli
from tests.support.broken import OE_DIR

TRAINING = LEGACY / "skipthoughts_training_lngru"
ST = LEGACY / "skipthoughts_gru"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A converted model and the small inputs the commands read (all outside the directory under test)."""
    root = tmp_path_factory.mktemp("inputs")
    write_order_embedding(read_order_embedding(OE_DIR / "oe_order_gru"), root / "oe", name="oe")
    (root / "s.txt").write_text("a dog\na cat\n", encoding="utf-8")
    (root / "caps.txt").write_text("a\nb\nc\nd\ne\n", encoding="utf-8")
    np.save(root / "v.npy", np.ones((2, 16), np.float32))
    np.save(root / "im.npy", np.ones((1, 20), np.float32))
    return {"root": root, "model": root / "oe"}


Command = Callable[[Path, dict[str, Path]], list[str]]


def _at(inputs: dict[str, Path], name: str) -> str:
    return str(inputs["root"] / name)


FILE_OUTPUTS: dict[str, Command] = {
    "encode --output": lambda out, i: [
        "encode", str(i["model"]), "--input", _at(i, "s.txt"), "--output", str(out)],
    "score --output": lambda out, i: [
        "score", str(i["model"]), "--sentences", _at(i, "v.npy"), "--images", _at(i, "v.npy"),
        "--output", str(out)],
    "eval --json": lambda out, i: [
        "eval", "--model", str(i["model"]), "--captions", _at(i, "caps.txt"), "--images", _at(i, "im.npy"),
        "--json", str(out)],
    "dictionary recover --out": lambda out, i: [
        "dictionary", "recover", "--uni-skip", str(ST), "--out", str(out)],
}  # fmt: skip

DIR_OUTPUTS: dict[str, Command] = {
    "convert order-embedding --out": lambda out, i: [
        "convert", "order-embedding", str(OE_DIR / "oe_order_gru"), "--out", str(out)],
    "convert skip-thoughts --out": lambda out, i: [
        "convert", "skip-thoughts", "--uni", str(ST / "uni_skip.npz"), "--tables", str(ST),
        "--out", str(out)],
    "convert skip-thoughts-training --out": lambda out, i: [
        "convert", "skip-thoughts-training", str(TRAINING / "model.npz"), "--dictionary",
        str(TRAINING / "dictionary.pkl"), "--out", str(out)],
    "train world --out": lambda out, i: ["train", "world", "--out", str(out)],
    "train order-embedding --out": lambda out, i: [
        "train", "order-embedding", "--world", "demo", "--out", str(out)],
    "pull --dir": lambda out, i: ["pull", "lngru-order", "--from", str(OE_DIR), "--dir", str(out)],
    "gallery build --galleries-dir": lambda out, i: [
        "gallery", "build", "g", "--model", str(i["model"]), "--captions", _at(i, "s.txt"),
        "--galleries-dir", str(out)],
}  # fmt: skip


def _place(kind: str, work: Path, *, for_file: bool) -> Path:
    """Make the bad place ``kind`` inside ``work`` (or under /proc) and return the output path."""
    if kind == "under-a-file":
        (work / "afile").write_text("x")
        return work / "afile" / "out"
    if kind == "under-a-file-deeper":
        (work / "afile").write_text("x")
        return work / "afile" / "a" / "b"
    if kind == "in-proc":
        return Path("/proc") / f"lnserve-test-{uuid.uuid4().hex}" / "out"
    if kind == "a-fifo":
        os.mkfifo(work / "fifo")
        return work / "fifo"
    if kind == "read-only-directory":
        (work / "ro").mkdir()
        (work / "ro").chmod(0o555)
        return work / "ro" / "out"
    if kind == "the-wrong-kind":  # a directory for a file, a regular file for a directory
        if for_file:
            (work / "adir").mkdir()
            return work / "adir"
        (work / "afile").write_text("x")
        return work / "afile"
    raise AssertionError(kind)


PLACES = ("under-a-file", "under-a-file-deeper", "in-proc", "a-fifo", "read-only-directory", "the-wrong-kind")
CASES = [(flag, place) for flag in (*FILE_OUTPUTS, *DIR_OUTPUTS) for place in PLACES]


def _snapshot(work: Path) -> dict[str, int]:
    return {str(p.relative_to(work)): p.lstat().st_mode for p in work.rglob("*")}


@pytest.mark.parametrize(("flag", "place"), CASES, ids=[f"{f}-{p}".replace(" ", "_") for f, p in CASES])
def test_unwritable_output_place_is_one_line_and_exit_2(
    flag: str, place: str, inputs: dict[str, Path], tmp_path: Path
) -> None:
    if place == "read-only-directory" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory (in-proc covers the unwritable place)")
    work = tmp_path / "work"
    work.mkdir()
    out = _place(place, work, for_file=flag in FILE_OUTPUTS)
    before = _snapshot(work)
    command = FILE_OUTPUTS.get(flag) or DIR_OUTPUTS[flag]
    try:
        proc: subprocess.CompletedProcess[str] = run_cli(*command(out, inputs))
    finally:
        if (work / "ro").exists():
            (work / "ro").chmod(0o755)
    assert proc.returncode == 2, proc.stderr[-1500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert lines[0].startswith(f"lnserve: error [invalid_input]: {flag.split()[-1]} {out}: "), lines[0]
    assert _snapshot(work) == before  # nothing created, nothing replaced (the FIFO is still a FIFO)
    if place == "a-fifo":
        assert stat.S_ISFIFO((work / "fifo").lstat().st_mode)
