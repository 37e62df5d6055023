"""Every file a user names to the CLI, read as hostile input, through the real CLI (subprocesses): each
reader × {a symlink to /dev/zero, a FIFO nobody writes, one line over the per-line bound (for a .npy: a header
declaring a terabyte array), a directory} is refused with exit 2 and one line naming the file, no traceback,
within seconds; the CLI runs under a timeout, so a reader that hangs fails the test instead of hanging it.

The readers: the text inputs (``read_lines``), the .npy inputs (``load_matrix``) and every task's set files of
``eval skip-thoughts`` (``datasets``), each through its command."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.commands.common import MAX_TEXT_INPUT_BYTES, MAX_TEXT_LINE_BYTES
from lnserve.app.evaluation.datasets import MAX_FILE_BYTES, MAX_LINE_BYTES
from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from tests.support import eval_sets, hostile_files
from tests.support.broken import OE_DIR

CLI = [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()"]
KINDS = ("dev-zero", "fifo", "long-line", "directory")
DEADLINE_S = 60  # "within seconds" on a loaded 2-core machine; a FIFO that blocks would wait forever


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "oe"
    write_order_embedding(read_order_embedding(OE_DIR / "oe_order_gru"), out, name="oe")
    return out


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return eval_sets.write_all(tmp_path_factory.mktemp("sets"), binary_n=30)


def refused_in_time(args: list[str], bad: Path, code: str) -> str:
    """Run the CLI; it must end within DEADLINE_S with exit 2 and one line naming ``bad``."""
    start = time.monotonic()
    try:
        proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"lnserve {' '.join(args)} still running after {DEADLINE_S} s (reading {bad})")
    finally:
        hostile_files.release(bad)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith(f"lnserve: error [{code}]: {bad}: "), lines[0]
    assert time.monotonic() - start < DEADLINE_S
    return lines[0]


# -- text and .npy inputs of encode, score, eval, gallery build, train --------------------------------------
def _text_and_npy_readers(model: Path, tmp: Path, bad: Path) -> dict[str, tuple[list[str], bool]]:
    """Every CLI input read as text or as .npy: (the arguments with ``bad`` in its place, is it a .npy)."""
    dim = read_order_embedding(OE_DIR / "oe_order_gru").options["dim"]
    caps, ims = tmp / "caps.txt", tmp / "ims.npy"
    svec, ivec = tmp / "s.npy", tmp / "i.npy"
    caps.write_text("a dog\na cat on a mat\na man riding a horse\na red car\nthe sky\n", encoding="utf-8")
    np.save(ims, np.load(OE_DIR / "images.npy")[:1])
    np.save(svec, np.zeros((5, dim), np.float32))
    np.save(ivec, np.zeros((1, dim), np.float32))
    m, b, out, gd = str(model), str(bad), str(tmp / "o.npy"), str(tmp / "galleries")
    return {
        "encode --input": (["encode", m, "--input", b, "--output", out], False),
        "eval --captions": (["eval", "--model", m, "--captions", b, "--images", str(ims)], False),
        "gallery build --captions": (["gallery", "build", "g", "--model", m, "--captions", b,
                                      "--galleries-dir", gd], False),
        "gallery build --payloads": (["gallery", "build", "g", "--model", m, "--captions", str(caps),
                                      "--payloads", b, "--galleries-dir", gd], False),
        "train --captions": (["train", "order-embedding", "--out", str(tmp / "t"), "--captions", b,
                              "--images", str(ims)], False),
        "encode --images": (["encode", m, "--images", b, "--output", out], True),
        "score --sentences": (["score", m, "--sentences", b, "--images", str(ivec), "--output", out], True),
        "score --images": (["score", m, "--sentences", str(svec), "--images", b, "--output", out], True),
        "eval --images": (["eval", "--model", m, "--captions", str(caps), "--images", b], True),
        "gallery build --images": (["gallery", "build", "g", "--model", m, "--images", b,
                                    "--galleries-dir", gd], True),
        "train --images": (["train", "order-embedding", "--out", str(tmp / "t"), "--captions", str(caps),
                            "--images", b], True),
    }  # fmt: skip


READERS = [
    "encode --input",
    "eval --captions",
    "gallery build --captions",
    "gallery build --payloads",
    "train --captions",
    "encode --images",
    "score --sentences",
    "score --images",
    "eval --images",
    "gallery build --images",
    "train --images",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", READERS)
def test_every_input_file_reader_refuses_hostile_files(
    reader: str, kind: str, model: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "input"
    args, npy = _text_and_npy_readers(model, tmp_path, bad)[reader]
    hostile_files.make(kind, bad, max_bytes=MAX_TEXT_INPUT_BYTES, max_line_bytes=MAX_TEXT_LINE_BYTES, npy=npy)
    line = refused_in_time(args, bad, "invalid_input")
    if kind == "long-line":
        assert ("header declares" in line) if npy else ("line 2 is longer than the 1 MiB limit" in line)
    assert not (tmp_path / "o.npy").exists() and not (tmp_path / "galleries").exists()


# -- eval skip-thoughts: one file of each task ------------------------------------------------------------
TASK_FILE = {
    "mr": "rt-polarity.pos",
    "cr": "custrev.neg",
    "subj": "quote.tok.gt9.5000",
    "mpqa": "mpqa.pos",
    "trec": "TREC_10.label",
    "msrp": "msr_paraphrase_test.txt",
    "sick-r": "SICK_trial.txt",
    "sick-e": "SICK_test_annotated.txt",
    "sts14": "STS.gs.headlines.txt",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("task", list(TASK_FILE))
def test_every_eval_task_refuses_hostile_set_files(
    task: str, kind: str, sets: Path, model: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(sets, data)
    bad = data / TASK_FILE[task]
    hostile_files.make(kind, bad, max_bytes=MAX_FILE_BYTES, max_line_bytes=MAX_LINE_BYTES, pad=True)
    args = ["eval", "skip-thoughts", "--model", str(model), "--task", task, "--data", str(data), "--fast"]
    line = refused_in_time(args, bad, "eval_data")
    expected = {
        "dev-zero": "is a character device, not a regular file",
        "fifo": "is a FIFO (named pipe), not a regular file",
        "long-line": "line 2 is longer than the 64 KiB limit per line",
        "directory": "is a directory, not a regular file",
    }[kind]
    assert expected in line
