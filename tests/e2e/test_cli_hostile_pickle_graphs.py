"""Object graphs that are tiny on disk and huge when walked, through every pickle-reading entry point of the
real CLI (issue 30, finding 6).

A pickle's memo lets a 1 KB file describe a chain of 60 dicts each referring twice to the one before: 2**60
paths. The unfixed converters walked such values (``repr`` in an error message, ``str`` of an option, the
hash of a tuple key) and ran for minutes while memory grew. Each file here must be refused with one line and
exit 2 within seconds, in bounded memory (the child runs under an address-space limit and reports its peak
resident size), and nothing may be written.
"""

from __future__ import annotations

import collections
import os
import pickle
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import LEGACY
from tests.e2e.test_cli_errors import assert_refused
from tests.support import forged
from tests.support.broken import OE_DIR, copy_oe, copy_st
from tests.support.legacy_format import npy_object_header

PLACEHOLDER = "HOSTILE-SHAPE-GOES-HERE"
TRAINING = LEGACY / "skipthoughts_training_lngru"
CPU_S = 10.0  # refused "within seconds": the child's own CPU time, which a loaded machine does not inflate
WALL_S = 40.0  # and its wall time, loosely (8 engineers share 2 cores)
ADDRESS_SPACE = 3 << 30  # the child's virtual memory cap: a runaway walk fails instead of eating the machine
PEAK_RSS = 700 << 20  # what a refusal may cost at most (a normal conversion peaks near 100 MB)
MAX_LINE = 400


@dataclass(frozen=True)
class Shape:
    """A hostile value: a Python object pickled in place (sharing through the pickler's memo), or raw
    opcodes spliced where the placeholder string was (shapes too big to build as objects)."""

    value: Any
    raw: bytes | None = None


def _dag(levels: int, make: Callable[[Any], Any]) -> Any:
    node: Any = {}
    for _ in range(levels):
        node = make(node)
    return node


def _tuple_dag_key(levels: int) -> bytes:
    """``{t60: 1}`` with t0 = () and tn = (tn-1, tn-1), as raw opcodes: building the dict in this process
    would hash the key, which is the very walk under test (memo ids from 900000 clash with no other)."""
    ops = [b"})p900000\n0"]  # each level is memoised and popped: only the dict stays on the stack
    for i in range(levels):
        ops.append(b"g%d\ng%d\n\x86p%d\n0" % (900000 + i, 900000 + i, 900001 + i))
    return b"".join(ops) + b"g%d\nK\x01s" % (900000 + levels)


def _shapes() -> dict[str, Shape]:
    many = 2_200_000  # more containers than any legacy pickle holds: one list per word of a huge worddict
    deep = 100_000
    return {
        "dag-of-dicts": Shape(_dag(60, lambda d: {"a": d, "b": d})),
        "dag-of-lists-and-tuples": Shape(_dag(60, lambda d: [(d, d), (d, d)])),
        "dag-tuple-as-dict-key": Shape(PLACEHOLDER, raw=_tuple_dag_key(60)),  # hashing the key walks it all
        "wide-dag": Shape([list(range(2000))] * 20_000),  # one list of 2,000 ints, referred to 20,000 times
        "deep-nesting": Shape(PLACEHOLDER, raw=b"]" * deep + b"a" * (deep - 1)),
        "huge-object-count": Shape(PLACEHOLDER, raw=b"(" + b"]" * many + b"l"),
        "long-flat-list": Shape(list(range(200_000))),  # within every bound: only printing it is the fault
    }


SHAPES = _shapes()


def _embed(outer: Any, shape: Shape, protocol: int = 0) -> bytes:
    """``outer`` pickled, with the shape's raw opcodes (if any) where the placeholder string stood."""
    data = pickle.dumps(outer, protocol=protocol)
    if shape.raw is None:
        return data
    text = PLACEHOLDER.encode()
    opcode = b"V" + text + b"\n" if protocol == 0 else b"X" + struct.pack("<I", len(text)) + text
    assert data.count(opcode) == 1
    return data.replace(opcode, shape.raw)


def _legacy(path: Path) -> Any:
    with path.open("rb") as f:
        return pickle.load(f, encoding="latin1")  # trusted fixture


def _oe(key: str | None, *, worddict: bool = False) -> Callable[[Path, Shape], list[str]]:
    def setup(tmp: Path, shape: Shape) -> list[str]:
        prefix = copy_oe(tmp)
        legit = _legacy(OE_DIR / "oe_order_gru.pkl")
        options, words = dict(legit["options"]), dict(legit["worddict"])
        if worddict:
            words["zz"] = shape.value
        else:
            options[str(key)] = shape.value
        Path(f"{prefix}.pkl").write_bytes(_embed({"options": options, "worddict": words}, shape))
        return ["convert", "order-embedding", str(prefix), "--out", str(tmp / "out")]

    return setup


def _st_options(key: str) -> Callable[[Path, Shape], list[str]]:
    def setup(tmp: Path, shape: Shape) -> list[str]:
        src = copy_st(tmp)
        options = {**_legacy(src / "uni_skip.npz.pkl"), key: shape.value}
        (src / "uni_skip.npz.pkl").write_bytes(_embed(options, shape))
        return ["convert", "skip-thoughts", "--uni", str(src / "uni_skip.npz"), "--tables", str(src),
                "--out", str(tmp / "out")]  # fmt: skip

    return setup


def _table(tmp: Path, shape: Shape) -> Path:
    """A copy of the skip-thoughts directory whose utable.npy is a one-row object array holding the shape."""
    src = copy_st(tmp)
    outer = forged.array(np.dtype("O"), [shape.value], shape=(1,))
    (src / "utable.npy").write_bytes(npy_object_header(1) + _embed(outer, shape, protocol=2))
    return src


def _st_table(tmp: Path, shape: Shape) -> list[str]:
    src = _table(tmp, shape)
    return ["convert", "skip-thoughts", "--uni", str(src / "uni_skip.npz"), "--tables", str(src),
            "--out", str(tmp / "out")]  # fmt: skip


def _recover_table(tmp: Path, shape: Shape) -> list[str]:
    src = _table(tmp, shape)
    return ["dictionary", "recover", "--uni-skip", str(src), "--out", str(tmp / "out.pkl")]


def _training(tmp: Path) -> Path:
    for name in ("model.npz", "model.npz.pkl", "dictionary.pkl"):
        shutil.copy(TRAINING / name, tmp / name)
    return tmp


def _training_options(key: str) -> Callable[[Path, Shape], list[str]]:
    def setup(tmp: Path, shape: Shape) -> list[str]:
        root = _training(tmp)
        options = {**_legacy(root / "model.npz.pkl"), key: shape.value}
        (root / "model.npz.pkl").write_bytes(_embed(options, shape))
        return ["convert", "skip-thoughts-training", str(root / "model.npz"), "--dictionary",
                str(root / "dictionary.pkl"), "--out", str(tmp / "out")]  # fmt: skip

    return setup


def _training_dictionary(which: str) -> Callable[[Path, Shape], list[str]]:
    def setup(tmp: Path, shape: Shape) -> list[str]:
        root = _training(tmp)
        worddict = collections.OrderedDict([("the", 2), ("cat", shape.value if which == "worddict" else 3)])
        wordcount = collections.OrderedDict([("the", 9), ("cat", shape.value if which == "wordcount" else 8)])
        target, other = (worddict, wordcount) if which == "worddict" else (wordcount, worddict)
        hostile, plain = _embed(target, shape), pickle.dumps(other, protocol=0)
        data = hostile + plain if which == "worddict" else plain + hostile
        (root / "dictionary.pkl").write_bytes(data)
        return ["convert", "skip-thoughts-training", str(root / "model.npz"), "--dictionary",
                str(root / "dictionary.pkl"), "--out", str(tmp / "out")]  # fmt: skip

    return setup


ENTRY_POINTS: dict[str, Callable[[Path, Shape], list[str]]] = {
    "order-embedding-pkl-option": _oe("n_words"),
    "order-embedding-pkl-encoder": _oe("encoder"),
    "order-embedding-pkl-worddict": _oe(None, worddict=True),
    "skip-thoughts-options-pkl": _st_options("dim"),
    "skip-thoughts-options-encoder": _st_options("encoder"),
    "skip-thoughts-word-table": _st_table,
    "training-options-pkl": _training_options("n_words"),
    "training-dictionary-worddict": _training_dictionary("worddict"),
    "training-dictionary-wordcount": _training_dictionary("wordcount"),
    "dictionary-recover-word-table": _recover_table,
}

_CHILD = """
import atexit, os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
def _peak():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["PEAK_FILE"], "w") as out:
        hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]
        out.write(f"{{hwm}} {{usage.ru_utime + usage.ru_stime}}")
atexit.register(_peak)
from lnserve.app.cli import main
main()
"""


def _run_bounded(
    args: list[str], peak_file: Path
) -> tuple[subprocess.CompletedProcess[str], float, float, int]:
    """The real CLI under an address-space cap; (process, wall seconds, CPU seconds, peak resident bytes)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _CHILD.format(cap=ADDRESS_SPACE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PEAK_FILE": str(peak_file)},
    )
    wall = time.monotonic() - start
    hwm, cpu = peak_file.read_text().split() if peak_file.exists() else ("-1", "-1")
    return proc, wall, float(cpu), int(hwm) * 1024


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_hostile_object_graph_is_refused_quickly(entry: str, shape: str, tmp_path: Path) -> None:
    """Unfixed: the DAGs ran past the timeout with memory growing (or failed on the memory cap as an
    internal error), the tuple-key DAG hung inside the unpickler (hashing it), the long flat list was
    printed whole into a one-megabyte error line."""
    work = tmp_path / "work"
    work.mkdir()
    args = ENTRY_POINTS[entry](work, SHAPES[shape])
    before = _tree(work)
    try:
        proc, wall, cpu, peak = _run_bounded(args, tmp_path / "peak")
    except subprocess.TimeoutExpired:
        pytest.fail(f"{entry} x {shape}: still running after 60 s")
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr[-500:]}"
    line = assert_refused(proc, "unsafe_pickle" if "[unsafe_pickle]" in proc.stderr else "corrupt_file")
    assert len(line) <= MAX_LINE, f"{len(line)} characters: {line[:200]}..."
    assert 0 <= cpu < CPU_S, f"{entry} x {shape}: refused after {cpu:.1f} s of CPU"
    assert wall < WALL_S, f"{entry} x {shape}: refused after {wall:.1f} s"
    assert 0 < peak < PEAK_RSS, f"{entry} x {shape}: peak resident {peak >> 20} MB"
    assert _tree(work) == before  # nothing written, no staging directory left
