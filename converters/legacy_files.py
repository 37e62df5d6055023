"""Readers for the legacy on-disk formats. ``allow_pickle`` is never turned on: object arrays go through
the restricted unpickler instead."""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.converters.errors import CorruptFileError, TableMismatchError
from lnserve.converters.safe_pickle import py2_strings, safe_load

log = logging.getLogger("lnserve.converters")
_NUMPY_MULTIARRAY = ("numpy.core.multiarray", "numpy._core.multiarray")


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise CorruptFileError(f"{path}: file not found")
    return path


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of a ``numpy.savez`` archive; a truncated or pickled archive is a CorruptFileError."""
    require_file(path)
    try:
        # open the file ourselves: np.load(path) leaks its handle when the zip directory is truncated
        with path.open("rb") as fh, np.load(fh, allow_pickle=False) as archive:
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
    src: Path, dst: Path, *, progress: Callable[[int, int], None] | None = None, chunk_rows: int = 4096
) -> tuple[int, int]:
    """Stream a word table (``utable.npy`` / ``btable.npy``) into a plain float32 ``.npy`` at ``dst``.

    Accepts the legacy pickled object array (rows (dim,) or (1, dim)) and plain 2-d float arrays. The
    object array is never materialised: each row is written out as the unpickler builds it (see
    ``_StreamingTable``), so peak memory stays far below one table. Returns (rows, dim). On any error
    ``dst`` is removed, so a refused table leaves nothing behind.
    """
    require_file(src)
    try:
        return _convert_table(src, dst, progress=progress, chunk_rows=chunk_rows)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise


def _convert_table(
    src: Path, dst: Path, *, progress: Callable[[int, int], None] | None, chunk_rows: int
) -> tuple[int, int]:
    with src.open("rb") as f:
        shape, _, dtype = _read_npy_header(f, src)
        if dtype.hasobject:
            if len(shape) != 1:
                raise CorruptFileError(f"{src}: expected a 1-d object array of word vectors, found {shape}")
            offset = f.tell()
            streamed = _StreamingTable(dst, shape[0], path=src, progress=progress, chunk_rows=chunk_rows)
            if streamed.run(f):
                return streamed.n, streamed.require_dim()
            log.info("%s: rows are shared or out of order; converting without streaming", src)
            f.seek(offset)
            rows = safe_load(f, source=str(src))
            if not isinstance(rows, np.ndarray) or rows.ndim != 1 or not rows.dtype.hasobject:
                raise CorruptFileError(f"{src}: expected a 1-d object array of word vectors")
            return _write_rows(rows, dst, progress=progress, chunk_rows=chunk_rows, path=src)
    plain = np.load(src, mmap_mode="r", allow_pickle=False)
    if plain.ndim != 2:
        raise CorruptFileError(f"{src}: expected a 2-d table, found shape {plain.shape}")
    return _write_rows(plain, dst, progress=progress, chunk_rows=chunk_rows, path=src)


class _Placeholder:
    """Stands in for each ndarray the table pickle reconstructs; BUILD hands its state to the table."""

    __slots__ = ("index", "table")

    def __init__(self, table: _StreamingTable) -> None:
        self.table, self.index = table, -1

    def __setstate__(self, state: Any) -> None:
        self.index = self.table.accept(state)


class _StreamingTable:
    """Writes rows to ``dst`` as the restricted unpickler builds them, instead of keeping every array.

    The allow-listed ``_reconstruct`` is swapped for a factory of ``_Placeholder`` objects, so the
    unpickler's list and memo only hold tiny placeholders. ``run`` reports False when the pickle shares or
    reorders rows (never seen in real files); the caller then falls back to a full load.
    """

    OUTER = -2

    def __init__(
        self, dst: Path, n: int, *, path: Path, progress: Callable[[int, int], None] | None, chunk_rows: int
    ) -> None:
        self.dst, self.n, self.path, self.progress, self.chunk_rows = dst, n, path, progress, chunk_rows
        self.dim: int | None = None
        self.rows_written = 0
        self.outer: Any = None
        self._buf: np.ndarray | None = None
        self._fill = 0
        self._out: Any = None

    def require_dim(self) -> int:
        assert self.dim is not None
        return self.dim

    def _reconstruct(self, cls: Any, shape: Any, typecode: Any) -> _Placeholder:
        if cls is not np.ndarray:
            raise CorruptFileError(f"{self.path}: the table pickle reconstructs {cls!r}, not ndarray")
        return _Placeholder(self)

    def run(self, f: Any) -> bool:
        if self.n == 0:
            raise CorruptFileError(f"{self.path}: the table is empty")
        overrides = {(m, "_reconstruct"): self._reconstruct for m in _NUMPY_MULTIARRAY}
        with self.dst.open("wb") as self._out:
            top = safe_load(f, source=str(self.path), overrides=overrides)
            self._flush()
        if not isinstance(top, _Placeholder) or top.index != self.OUTER:
            raise CorruptFileError(f"{self.path}: expected a 1-d object array of word vectors")
        rows = self.outer
        if not isinstance(rows, list) or len(rows) != self.n:
            found = len(rows) if isinstance(rows, list) else type(rows).__name__
            raise TableMismatchError(f"{self.path}: header says {self.n} rows, the pickle holds {found}")
        if self.rows_written != self.n:
            return False
        return all(isinstance(r, _Placeholder) and r.index == i for i, r in enumerate(rows))

    def accept(self, state: Any) -> int:
        """BUILD of one reconstructed array: the outer object array, or one row to write now."""
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise CorruptFileError(f"{self.path}: unexpected ndarray state in the table pickle")
        shape, dtype, fortran, data = state[-4:]
        if not isinstance(dtype, np.dtype):
            raise CorruptFileError(f"{self.path}: unexpected ndarray state in the table pickle")
        if dtype.hasobject:
            if self.outer is not None or tuple(shape) != (self.n,):
                raise CorruptFileError(f"{self.path}: expected one 1-d object array of {self.n} rows")
            self.outer = data
            return self.OUTER
        index = self.rows_written
        raw = data.encode("latin1") if isinstance(data, str) else bytes(data)
        try:
            arr = np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")
        except (TypeError, ValueError) as exc:
            raise CorruptFileError(f"{self.path}: row {index} is not a readable array ({exc})") from None
        self.rows_written += 1
        self._write(np.asarray(arr).reshape(-1), index)
        return index

    def _write(self, vec: np.ndarray, index: int) -> None:
        if self.dim is None:
            self.dim = vec.size
            _write_table_header(self._out, self.n, self.dim)
            self._buf = np.empty((min(self.chunk_rows, self.n), self.dim), dtype="<f4")
        if vec.size != self.dim:
            raise TableMismatchError(f"{self.path}: row {index} has {vec.size} values, expected {self.dim}")
        if index >= self.n:
            raise TableMismatchError(f"{self.path}: more rows than the {self.n} the header declares")
        assert self._buf is not None
        self._buf[self._fill] = vec  # casts to float32 (exact for the legacy float32 rows)
        self._fill += 1
        if self._fill == len(self._buf):
            self._flush()

    def _flush(self) -> None:
        if self._buf is None or self._fill == 0:
            return
        self._out.write(self._buf[: self._fill].tobytes())
        self._fill = 0
        if self.progress is not None:
            self.progress(self.rows_written, self.n)


def _write_table_header(out: Any, n: int, dim: int) -> None:
    np.lib.format.write_array_header_1_0(
        out,
        {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False, "shape": (n, dim)},
    )


def _write_rows(
    rows: np.ndarray, dst: Path, *, progress: Callable[[int, int], None] | None, chunk_rows: int, path: Path
) -> tuple[int, int]:
    n = len(rows)
    if n == 0:
        raise CorruptFileError(f"{path}: the table is empty")
    dim = int(np.asarray(rows[0]).size)
    is_object = rows.dtype.hasobject
    with dst.open("wb") as out:
        _write_table_header(out, n, dim)
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
