"""Reading a file the user named, as hostile input: a regular file only (a symlink to one is fine), never
more than a bound, and never a line longer than a bound.

A FIFO would block the reader forever, ``/dev/zero`` would fill memory, a directory or a device is no
data set; one very long line would be tokenised and encoded at the cost of gigabytes. Each refusal is one
``UserInputError`` (the caller's subclass) naming the file: one line on the CLI, exit 2.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lnserve.errors import UserInputError, shown

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return "1 byte" if n == 1 else f"{n:,} bytes"


def open_regular(path: Path, error: type[UserInputError] = UserInputError) -> tuple[int, int]:
    """``(fd, size)`` of ``path`` opened for reading, refused unless it is a regular file.

    The kind is checked before the open (opening a FIFO for reading blocks until a writer comes, opening a
    device may act on it) and again on the open descriptor (the path may have been swapped in between);
    ``O_NONBLOCK`` keeps even that swapped-in FIFO from blocking the open. The caller closes ``fd``."""
    name = shown(str(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{name}: no such file") from None
    except OSError as exc:
        raise error(f"{name}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{name}: is {_kind(st.st_mode)}, not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"{name}: cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{name}: is {_kind(st.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_bounded(
    path: Path,
    *,
    max_bytes: int,
    max_line_bytes: int,
    error: type[UserInputError] = UserInputError,
) -> bytes:
    """The whole of the regular file ``path``, refused (``error`` naming it) when it holds more than
    ``max_bytes`` or a line (up to ``\\n``) longer than ``max_line_bytes``; reading stops at the first
    excess, so neither a huge file nor one huge line is ever held in memory."""
    name = shown(str(path))
    fd, size = open_regular(path, error)
    try:
        if size > max_bytes:
            raise error(f"{name}: {size:,} bytes, over the {_size(max_bytes)} limit for this file")
        chunk = max(1, min(max_line_bytes, 1 << 20))  # a line inside one chunk is shorter than the bound
        chunks: list[bytes] = []
        total = line = 0  # bytes so far; length of the line still open at the end of the last chunk
        while block := _read(fd, chunk, name, error):
            total += len(block)
            if total > max_bytes:
                raise error(f"{name}: over the {_size(max_bytes)} limit for this file (it grew while read)")
            first = block.find(b"\n")
            if first < 0:  # the open line goes on
                line += len(block)
                over = line > max_line_bytes
            else:  # it ends at ``first``; the lines after it are shorter than a chunk
                over = line + first > max_line_bytes
                line = len(block) - block.rfind(b"\n") - 1
            if over:
                number = sum(c.count(b"\n") for c in chunks) + 1
                raise error(
                    f"{name}: line {number:,} is longer than the {_size(max_line_bytes)} limit per line"
                )
            chunks.append(block)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read(fd: int, n: int, name: str, error: type[UserInputError]) -> bytes:
    try:
        return os.read(fd, n)
    except OSError as exc:
        raise error(f"{name}: cannot read ({exc.strerror or exc})") from None
