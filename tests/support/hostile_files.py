"""Hostile stand-ins for an input file, made at a given path: what an attacker can put where lnserve expects
a data file. Each kind must be refused with one line naming the path, within seconds.

``dev-zero``: a symlink to ``/dev/zero`` (endless bytes); ``fifo``: a named pipe nobody writes (opening it
blocks); ``directory``; ``long-line``: one line just over the reader's per-line bound, made of words (for
a ``.npy``, a header declaring a terabyte array in a file of a few bytes); ``oversized``: a sparse file one
byte over the reader's size bound (no disk used).
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

KINDS = ("dev-zero", "fifo", "directory", "long-line", "oversized")


def make(
    kind: str, path: Path, *, max_bytes: int, max_line_bytes: int, npy: bool = False, pad: bool = False
) -> None:
    """``kind`` at ``path``. ``pad``: the long line is the existing file's second line followed by spaces,
    which every set reader strips: the file stays valid in all but its length, so only the bound refuses
    it."""
    if kind == "long-line" and pad:
        lines = path.read_bytes().split(b"\n")
        lines[1] += b" " * max_line_bytes
        path.write_bytes(b"\n".join(lines))
        return
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "long-line" and npy:
        path.write_bytes(huge_npy_header() + b"\0" * 64)
    elif kind == "long-line":
        words = b"a " * (max_line_bytes // 2 + 1)  # many words: a reader that took it would encode them all
        path.write_bytes(b"a first line\n" + words + b"\nlast\n")
    elif kind == "oversized":
        with path.open("wb") as f:
            f.truncate(max_bytes + 1)
    else:
        raise ValueError(kind)


def huge_npy_header(shape: tuple[int, int] = (10**9, 1000)) -> bytes:
    """A valid .npy header for a float32 array of ``shape`` (4 TB by default), without the data."""
    from numpy.lib import format as npy

    buf = io.BytesIO()
    npy.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buf.getvalue()


def release(path: Path) -> None:
    """Unblock a reader stuck opening the FIFO ``path`` (a test must never hang on the code under test): a
    writer that opens and closes gives that reader end-of-file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader waiting (ENXIO), or no FIFO
        return
    os.close(fd)


def raised_within(seconds: float, fn: Callable[[], object], path: Path) -> BaseException | None:
    """What ``fn()`` raised (None if nothing), failing the test when it is still running after ``seconds``
    (a reader blocked on the FIFO ``path`` is released first, so that no thread is left hanging)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        release(path)
        worker.join(5)
        pytest.fail(f"reading {path} still running after {seconds} s")
    return raised[0] if raised else None
