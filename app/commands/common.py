"""What several commands share: the backend option and reading / writing their input and output files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from lnserve.converters.errors import EncodeInputError

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


def save_npy(path: Path, arr: np.ndarray) -> None:
    """Write atomically: a failure never leaves a partial output file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.ascontiguousarray(arr, dtype=np.float32))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
