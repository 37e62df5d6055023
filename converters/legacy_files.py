"""Readers for the legacy on-disk formats. ``allow_pickle`` is never turned on: object arrays go through
the restricted unpickler instead."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from converters.errors import CorruptFileError, TableMismatchError
from converters.safe_pickle import py2_strings, safe_load


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise CorruptFileError(f"{path}: file not found")
    return path


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of a ``numpy.savez`` archive; a truncated or pickled archive is a CorruptFileError."""
    require_file(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise CorruptFileError(f"{path}: not a readable .npz archive ({exc})") from None


def read_legacy_pickle(path: Path) -> Any:
    """A Python 2 protocol-0 pickle (options / worddict), with UTF-8 strings recovered."""
    require_file(path)
    with path.open("rb") as f:
        return py2_strings(safe_load(f, source=str(path)))


def _read_npy_header(f: Any, path: Path) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        return np.lib.format.read_array_header_2_0(f)
    except ValueError as exc:
        raise CorruptFileError(f"{path}: not a .npy file ({exc})") from None


def _table_row(row: Any, dim: int, index: int, path: Path) -> np.ndarray:
    vec = np.asarray(row).reshape(-1)  # rows are (dim,) or (1, dim)
    if vec.shape != (dim,):
        raise TableMismatchError(f"{path}: row {index} has {vec.size} values, expected {dim}")
    return vec.astype(np.float32, copy=False)


def convert_table(
    src: Path, dst: Path, *, progress: Callable[[int, int], None] | None = None, chunk_rows: int = 8192
) -> tuple[int, int]:
    """Stream a word table (``utable.npy`` / ``btable.npy``) into a plain float32 ``.npy`` at ``dst``.

    Accepts the legacy pickled object array (rows (dim,) or (1, dim)) and plain 2-d float arrays. Rows
    are written chunk by chunk and released from the source as they go, so peak memory stays close to one
    table. Returns (rows, dim).
    """
    require_file(src)
    with src.open("rb") as f:
        _, _, dtype = _read_npy_header(f, src)
        if dtype.hasobject:
            rows = safe_load(f, source=str(src))
            if not isinstance(rows, np.ndarray) or rows.ndim != 1:
                raise CorruptFileError(f"{src}: expected a 1-d object array of word vectors")
            return _write_rows(rows, dst, progress=progress, chunk_rows=chunk_rows, path=src)
    plain = np.load(src, mmap_mode="r", allow_pickle=False)
    if plain.ndim != 2:
        raise CorruptFileError(f"{src}: expected a 2-d table, found shape {plain.shape}")
    return _write_rows(plain, dst, progress=progress, chunk_rows=chunk_rows, path=src)


def _write_rows(
    rows: np.ndarray, dst: Path, *, progress: Callable[[int, int], None] | None, chunk_rows: int, path: Path
) -> tuple[int, int]:
    n = len(rows)
    if n == 0:
        raise CorruptFileError(f"{path}: the table is empty")
    dim = int(np.asarray(rows[0]).size)
    is_object = rows.dtype.hasobject
    with dst.open("wb") as out:
        np.lib.format.write_array_header_1_0(
            out,
            {
                "descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
                "fortran_order": False,
                "shape": (n, dim),
            },
        )
        for start in range(0, n, chunk_rows):
            stop = min(start + chunk_rows, n)
            if is_object:
                block = np.stack([_table_row(rows[i], dim, i, path) for i in range(start, stop)])
                rows[start:stop] = None  # release the source rows already written
            else:
                block = np.asarray(rows[start:stop], dtype="<f4")
            out.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
            if progress is not None:
                progress(stop, n)
    return n, dim


def read_dictionary(path: Path) -> list[str]:
    """``dictionary.txt``: split on b'\\n' only (Python 2 semantics), decode UTF-8, strip each word."""
    data = require_file(path).read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    words: list[str] = []
    for i, line in enumerate(lines):
        try:
            words.append(line.decode("utf-8").strip())
        except UnicodeDecodeError:
            raise CorruptFileError(f"{path}: line {i + 1} is not valid UTF-8") from None
    return words
