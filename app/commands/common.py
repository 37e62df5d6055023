"""What several commands share: the backend option and reading / writing their input and output files."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, BinaryIO

import numpy as np
import typer

from converters.errors import EncodeInputError, UserInputError

BackendOpt = Annotated[str, typer.Option("--backend", help="Inference backend: onnx or torch.")]


def read_lines(path: Path) -> list[str]:
    """UTF-8 text, one item per line (a trailing newline is optional; CRLF tolerated)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EncodeInputError(f"{path}: cannot read input ({exc.strerror})") from None
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


def load_matrix(path: Path, what: str, *, mmap: bool = False) -> np.ndarray:
    """A 2-d float array from a .npy (never unpickled), as float32; ``mmap`` leaves large files on disk."""
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise EncodeInputError(f"{path}: cannot read {what} as a .npy array ({exc})") from None
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.floating):
        raise EncodeInputError(f"{path}: {what} must be a 2-d float array, got {arr.dtype} {arr.shape}")
    return arr.astype(np.float32, copy=False)


def check_output(path: Path, flag: str = "--output") -> None:
    """Refuse an output path that can never be written as a file, before any work is done."""
    if path.is_dir():
        raise UserInputError(f"{flag} {path}: is a directory; give the path of the file to write")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserInputError(f"{flag} {path}: {parent} is a file, not a directory")


def save_npy(path: Path, arr: np.ndarray, flag: str = "--output") -> None:
    """Write a float32 .npy atomically: a failure never leaves a partial output file."""
    write_atomic(path, lambda f: np.save(f, np.ascontiguousarray(arr, dtype=np.float32)), flag)


def save_text(path: Path, text: str, flag: str) -> None:
    """Write UTF-8 text atomically."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")), flag)


def write_atomic(path: Path, write: Callable[[BinaryIO], object], flag: str) -> None:
    """Write through a temporary file beside ``path`` and a rename. The file gets the usual permissions
    (0666 less the umask), not mkstemp's 0600, so other users and services can read what was written."""
    check_output(path, flag)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as exc:
        raise UserInputError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
