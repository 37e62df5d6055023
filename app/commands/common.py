"""What several commands share: the backend option and reading / writing their input and output files."""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO

import numpy as np
import typer

from lnserve.errors import UserInputError
from lnserve.input_files import open_regular, read_bounded
from lnserve.storage import storage_full

from ..runtime.errors import EncodeInputError
from ..runtime.precisions import HELP as PRECISION_HELP

if TYPE_CHECKING:  # rich loads only when a command draws progress
    from rich.progress import Progress, ProgressColumn, TaskID

BackendOpt = Annotated[str, typer.Option("--backend", help="Inference backend: onnx or torch.")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help=f"Precision profile: {PRECISION_HELP}.")]


# Text inputs (sentences, captions, payload lines) and the bounds they are read under (``read_bounded``):
# a caption file of millions of lines fits; /dev/zero, a FIFO or one line of 200 MB is refused at once.
MAX_TEXT_INPUT_BYTES = 256 << 20
MAX_TEXT_LINE_BYTES = 1 << 20


def read_lines(path: Path) -> list[str]:
    """UTF-8 text, one item per line (a trailing newline is optional; CRLF tolerated), from a regular file
    within ``MAX_TEXT_INPUT_BYTES`` and ``MAX_TEXT_LINE_BYTES`` a line."""
    data = read_bounded(
        path, max_bytes=MAX_TEXT_INPUT_BYTES, max_line_bytes=MAX_TEXT_LINE_BYTES, error=EncodeInputError
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodeInputError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise EncodeInputError(f"{path}: input file is empty (expected one sentence per line)")
    return [line.removesuffix("\r") for line in lines]


NPY_MAGIC = b"\x93NUMPY"


def load_matrix(path: Path, what: str, *, mmap: bool = False) -> np.ndarray:
    """A 2-d float array from a .npy (never unpickled), as float32; ``mmap`` leaves large files on disk.

    Anything else (text, .npz, a pickle) is named as what it looks like: numpy's own message would advise
    loading it "unsafely" with ``allow_pickle``, which lnserve never does. Only a regular file is opened,
    and its header is checked against its size before numpy allocates what the header declares."""
    fd, size = open_regular(path, EncodeInputError)
    with os.fdopen(fd, "rb") as f:
        head = _read_head(f, path)
        if not head.startswith(NPY_MAGIC):
            raise EncodeInputError(
                f"{path}: {what} must be a .npy file (a 2-d float array from numpy.save); {_looks_like(head)}"
            )
        _check_npy_header(f, path, what, size)
        try:
            f.seek(0)
            # numpy maps a file by name only: the header just checked is that of the file it maps
            arr = np.load(path, mmap_mode="r", allow_pickle=False) if mmap else np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise EncodeInputError(f"{path}: cannot read {what} as a .npy array ({exc})") from None
    return arr.astype(np.float32, copy=False)


def _check_npy_header(f: BinaryIO, path: Path, what: str, size: int) -> None:
    """Refuse a .npy whose header is not a 2-d float array, or declares more data than the file holds (a
    truncated or crafted file: numpy would first allocate the declared size, terabytes if it says so)."""
    from numpy.lib import format as npy

    try:
        f.seek(0)
        version = npy.read_magic(f)
        reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _, dtype = reader(f)
    except (OSError, ValueError, EOFError) as exc:
        reason = str(exc)
        if "pickle" in reason or "object" in reason.lower():
            reason = "it holds Python objects (dtype object), which lnserve never unpickles"
        raise EncodeInputError(f"{path}: cannot read {what} as a .npy array ({reason})") from None
    if dtype.hasobject:
        raise EncodeInputError(
            f"{path}: cannot read {what} as a .npy array "
            "(it holds Python objects (dtype object), which lnserve never unpickles)"
        )
    if len(shape) != 2 or not np.issubdtype(dtype, np.floating):
        raise EncodeInputError(f"{path}: {what} must be a 2-d float array, got {dtype} {shape}")
    declared = f.tell() + shape[0] * shape[1] * dtype.itemsize
    if declared > size:
        raise EncodeInputError(
            f"{path}: {what}: the header declares a {dtype} {shape} array ({declared:,} bytes) but the file "
            f"holds {size:,} bytes (truncated?)"
        )


def _read_head(f: BinaryIO, path: Path) -> bytes:
    try:
        return f.read(512)
    except OSError as exc:
        raise EncodeInputError(f"{path}: cannot read input ({exc.strerror})") from None


def _looks_like(head: bytes) -> str:
    """What a file that is not a .npy seems to be, from its first bytes."""
    if not head:
        return "the file is empty"
    if head.startswith(b"PK\x03\x04"):
        return "this is a zip archive (.npz?): save the one array with numpy.save"
    if head[:1] == b"\x80":
        return "this looks like a Python pickle, which is never loaded"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the 512th byte
            return "the file does not start with the .npy signature"
    return "this looks like a text file"


def check_output(path: Path, flag: str = "--output") -> None:
    """Refuse an output path that can never be written as a file, before any work is done: a directory, a
    device, FIFO or socket (the rename that writes the file would replace it: ``/dev/null`` as root), or a
    place under a file or where nothing can be created (``/proc``, a read-only file system)."""
    if path.is_dir():
        raise UserInputError(f"{flag} {path}: is a directory; give the path of the file to write")
    if path.exists() and not path.is_file():
        raise UserInputError(f"{flag} {path}: is not a regular file (a device, FIFO or socket); give a file")
    _check_parents(path, flag)


def check_output_dir(path: Path, flag: str = "--out") -> None:
    """Refuse an output directory that is a file or lies under one, or where nothing can be created."""
    if path.exists() and not path.is_dir():
        what = "a file" if path.is_file() else "not a directory (a device, FIFO or socket)"
        raise UserInputError(f"{flag} {path}: is {what}; give a directory")
    _check_parents(path, flag)


def _check_parents(path: Path, flag: str) -> None:
    """The nearest existing ancestor must be a directory in which a file can be created (tried, then
    removed): only that tells ``/proc`` or a read-only mount from a writable directory, even for root."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserInputError(f"{flag} {path}: {parent} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".lnserve-probe-", dir=parent)
    except OSError as exc:
        raise UserInputError(
            f"{flag} {path}: nothing can be created in {parent} ({exc.strerror or exc})"
        ) from None
    os.close(fd)
    os.unlink(probe)


def save_npy(path: Path, arr: np.ndarray, flag: str = "--output") -> None:
    """Write a float32 .npy atomically: a failure never leaves a partial output file."""
    write_atomic(path, lambda f: np.save(f, np.ascontiguousarray(arr, dtype=np.float32)), flag)


def save_text(path: Path, text: str, flag: str) -> None:
    """Write UTF-8 text atomically."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")), flag)


def write_atomic(path: Path, write: Callable[[BinaryIO], object], flag: str) -> None:
    """Write through a temporary file beside ``path`` and a rename. The file gets the usual permissions
    (0666 less the umask), not mkstemp's 0600, so other users and services can read what was written.

    Raises:
        StorageFullError: out of space (disk, quota, file-size limit). UserInputError: any other failure
        (permissions, a read-only file system...).
    """
    check_output(path, flag)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as exc:
        if (full := storage_full(exc, f"{flag} {path}")) is not None:
            raise full from None  # not the caller's mistake: exit 1, as every full disk
        raise UserInputError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def stderr_progress(*middle: ProgressColumn) -> Progress:
    """A rich progress display on stderr (stdout carries results), drawn only when stderr is a terminal:
    the description, a bar, then ``middle`` (counts, bytes, speed) and the time remaining."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *middle,
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """One counted task on ``stderr_progress``; yields ``advance(n)``."""
    from rich.progress import MofNCompleteColumn

    with stderr_progress(MofNCompleteColumn()) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def labelled_progress(bar: Progress, prefix: str = "") -> Callable[[str, int, int], None]:
    """A converter's ``progress(label, done, total)`` on ``bar``: one task per label, made on first use."""
    tasks: dict[str, TaskID] = {}

    def progress(label: str, done: int, total: int) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(f"{prefix}{label}", total=total)
        bar.update(tasks[label], completed=done)

    return progress
