"""Readers for the legacy on-disk formats. ``allow_pickle`` is never turned on: object arrays go through
the restricted unpickler instead.

Archives are hostile input too: an ``.npz`` is opened without decompressing anything, only the members a
converter asks for are read, each bounded by the shape its own header declares, and a member that expands
beyond ``MAX_RATIO`` is refused before it is inflated (a 2 MB zip bomb can declare 8 GiB).
"""

from __future__ import annotations

import contextlib
import logging
import math
import mmap
import operator
import os
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from lnserve.errors import brief, shown
from lnserve.input_files import read_bounded

from .errors import CorruptFileError, TableMismatchError
from .safe_pickle import py2_strings, safe_load

log = logging.getLogger("lnserve.converters")
_NUMPY_MULTIARRAY = ("numpy.core.multiarray", "numpy._core.multiarray")
MAX_RATIO = 100  # np.savez stores members (1:1) and float weights deflate to about 1.1:1
_RATIO_FLOOR = 1 << 20  # a member this small is harmless whatever its ratio
_CHUNK = 1 << 20
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,  # zipfile's answer to a compression method it does not support
    RuntimeError,  # an encrypted member
)  # what reading a crafted or damaged archive raises: each becomes corrupt_file


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise CorruptFileError(f"{path}: file not found")
    return path


@dataclass(frozen=True)
class NpyHeader:
    """What a member's ``.npy`` header declares; ``check_params`` reads ``shape`` and ``dtype`` from it."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool
    offset: int  # where the data starts

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


class NpzArchive:
    """An open ``.npz``: its array names are known, nothing is decompressed until a member is asked for."""

    def __init__(self, path: Path, zf: zipfile.ZipFile, size: int) -> None:
        self.path, self._zf, self._size = path, zf, size
        members: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            key = info.filename.removesuffix(".npy")
            if key in members:
                raise CorruptFileError(f"{path}: member {shown(info.filename)!r} appears more than once")
            members[key] = info
        self._members = members
        self.keys = list(members)

    def headers(self, keys: Iterable[str]) -> dict[str, NpyHeader]:
        """The headers of those ``keys`` that are present (checked against the member's sizes)."""
        return {k: self._header(k) for k in keys if k in self._members}

    def arrays(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The arrays of those ``keys`` that are present, each read no further than its header declares."""
        return {k: self._array(k) for k in keys if k in self._members}

    def _fail(self, key: str, why: str) -> CorruptFileError:
        return CorruptFileError(f"{self.path}: member {shown(self._members[key].filename)!r} {why}")

    def _header(self, key: str) -> NpyHeader:
        info = self._members[key]
        if info.compress_size > self._size:
            raise self._fail(
                key, f"claims {info.compress_size} compressed bytes, more than the whole archive"
            )
        if info.file_size > _RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            ratio = info.file_size / max(info.compress_size, 1)
            raise self._fail(
                key,
                f"expands {ratio:,.0f}:1 to {info.file_size:,} bytes (limit {MAX_RATIO}:1): "
                "refusing a likely zip bomb",
            )
        try:
            with self._zf.open(info) as f:
                shape, fortran, dtype = _read_npy_header(f, self.path)
                header = NpyHeader(tuple(shape), dtype, bool(fortran), f.tell())
        except CorruptFileError as exc:
            raise self._fail(key, f"is not a .npy array ({exc})") from None
        except _ZIP_ERRORS as exc:
            raise self._fail(key, f"is unreadable ({shown(str(exc))})") from None
        if dtype.hasobject:
            raise self._fail(key, "holds Python objects (refused: parameters are plain arrays)")
        if info.file_size != header.offset + header.nbytes:
            raise self._fail(
                key,
                f"is {info.file_size:,} bytes but its header declares {header.shape} of {dtype.str} "
                f"({header.offset + header.nbytes:,} bytes)",
            )
        return header

    def _array(self, key: str) -> np.ndarray:
        header = self._header(key)
        flat = np.empty(math.prod(header.shape), dtype=header.dtype)
        raw = flat.view(np.uint8).reshape(-1) if flat.size else np.empty(0, np.uint8)
        try:
            with self._zf.open(self._members[key]) as f:
                f.seek(header.offset)
                filled = 0
                while filled < header.nbytes:  # zipfile checks the CRC once the last byte is read
                    got = cast(zipfile.ZipExtFile, f).readinto(raw[filled : filled + _CHUNK].data)
                    if not got:
                        raise self._fail(key, f"ends after {filled:,} of {header.nbytes:,} data bytes")
                    filled += got
        except _ZIP_ERRORS as exc:
            raise self._fail(key, f"is unreadable ({shown(str(exc))})") from None
        return flat.reshape(header.shape, order="F" if header.fortran else "C")


@contextmanager
def open_npz(path: Path) -> Iterator[NpzArchive]:
    """Open a ``numpy.savez`` archive; a truncated or non-zip file, or a duplicated member, is corrupt."""
    require_file(path)
    # open the file ourselves: zipfile leaks nothing, np.load(path) leaked its handle on a truncated directory
    with path.open("rb") as fh:
        try:
            zf = zipfile.ZipFile(fh)
        except _ZIP_ERRORS as exc:
            raise CorruptFileError(f"{path}: not a readable .npz archive ({shown(str(exc))})") from None
        with zf:
            yield NpzArchive(path, zf, os.fstat(fh.fileno()).st_size)


def read_npz(path: Path, keys: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive (only ``keys`` when given); see ``NpzArchive``."""
    with open_npz(path) as npz:
        return npz.arrays(npz.keys if keys is None else keys)


def int_option(options: Mapping[str, Any], key: str, source: Path) -> int:
    """A positive integer option (a dimension); anything else is a clear error, not a crash later."""
    value = options[key]
    try:
        number = operator.index(value)
    except TypeError:
        number = 0
    if number < 1 or isinstance(value, bool):
        raise CorruptFileError(f"{source}: option {key} must be a positive integer, found {brief(value)}")
    return number


def text_option(options: Mapping[str, Any], key: str, source: Path, *, default: str | None = None) -> str:
    """A short text option (a cell or method name). Never ``str()`` of what the pickle holds: a shared
    graph of containers has no end when printed."""
    value = options.get(key, default)
    if type(value) is not str or len(value) > 64:
        raise CorruptFileError(f"{source}: option {key} must be a short text, found {brief(value)}")
    return value


def number_option(options: Mapping[str, Any], key: str, source: Path, *, default: float) -> float:
    """A finite real option (a margin)."""
    value = options.get(key, default)
    if type(value) not in (int, float, bool) or not math.isfinite(value):
        raise CorruptFileError(f"{source}: option {key} must be a finite number, found {brief(value)}")
    return float(value)


def flag_option(options: Mapping[str, Any], key: str, source: Path, *, default: bool) -> bool:
    """A yes / no option (Python 2 pickles write True / False, sometimes 0 / 1)."""
    value = options.get(key, default)
    if type(value) not in (bool, int) or value not in (0, 1):
        raise CorruptFileError(f"{source}: option {key} must be True or False, found {brief(value)}")
    return bool(value)


def read_legacy_pickle(path: Path) -> Any:
    """A Python 2 protocol-0 pickle (options / worddict), with UTF-8 strings recovered."""
    require_file(path)
    with path.open("rb") as f:
        return py2_strings(safe_load(f, source=str(path)))


def _read_npy_header(f: IO[bytes], path: Path) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(f)
        raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, SyntaxError, TypeError, EOFError) as exc:
        raise CorruptFileError(f"{path}: not a .npy file ({shown(str(exc))})") from None


def _table_row(row: Any, dim: int, index: int, path: Path) -> np.ndarray:
    vec = np.asarray(row).reshape(-1)  # rows are (dim,) or (1, dim)
    _check_row_dtype(vec.dtype, index, path)
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
            rows = safe_load(f, source=str(src), object_arrays=True)
            if not isinstance(rows, np.ndarray) or rows.ndim != 1 or not rows.dtype.hasobject:
                raise CorruptFileError(f"{src}: expected a 1-d object array of word vectors")
            return _write_rows(rows, dst, progress=progress, chunk_rows=chunk_rows, path=src)
    try:
        plain = np.load(src, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:  # e.g. a header declaring more rows than the file holds
        raise CorruptFileError(f"{src}: not a readable .npy table ({shown(str(exc))})") from None
    if plain.ndim != 2:
        raise CorruptFileError(f"{src}: expected a 2-d table, found shape {plain.shape}")
    _check_row_dtype(plain.dtype, 0, src)
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
        self._row_dtype: np.dtype | None = None

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
        with self._open_output() as self._out:
            top = safe_load(
                f, source=str(self.path), overrides=overrides, object_arrays=True, leaves=(_Placeholder,)
            )
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

    def _open_output(self) -> Any:
        return self.dst.open("wb")

    def accept(self, state: Any) -> int:
        """BUILD of one reconstructed array: the outer object array, or one row to write now.

        ``state`` was checked by the restricted unpickler: (1, shape, a dtype it built, fortran, data of
        exactly the size the shape needs, or a list for the object array).
        """
        _, shape, dtype, fortran, data = state
        if dtype.hasobject:
            if self.outer is not None or tuple(shape) != (self.n,):
                raise CorruptFileError(f"{self.path}: expected one 1-d object array of {self.n} rows")
            self.outer = data
            return self.OUTER
        index = self.rows_written
        if dtype is not self._row_dtype:  # rows share one memoised dtype: check it once
            _check_row_dtype(dtype, index, self.path)
            self._row_dtype = dtype
        arr = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
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


RowVisitor = Callable[[int, np.ndarray, int | None], None]  # (row index, float32 row, ndim as stored)


class _VisitingTable(_StreamingTable):
    """``_StreamingTable`` handing each row, with the number of dimensions it was stored with, to a visitor
    instead of writing it (a legacy table's (dim,) rows are the model's own, (1, dim) the regression's)."""

    def __init__(self, n: int, *, path: Path, visit: RowVisitor) -> None:
        super().__init__(path, n, path=path, progress=None, chunk_rows=1)
        self.visit = visit
        self._ndim: int | None = None

    def _open_output(self) -> Any:
        return contextlib.nullcontext()

    def accept(self, state: Any) -> int:
        self._ndim = len(state[1]) if not state[2].hasobject else None
        return super().accept(state)

    def _write(self, vec: np.ndarray, index: int) -> None:
        if self.dim is None:
            self.dim = vec.size
        if vec.size != self.dim:
            raise TableMismatchError(f"{self.path}: row {index} has {vec.size} values, expected {self.dim}")
        self.visit(index, vec.astype(np.float32, copy=False), self._ndim)

    def _flush(self) -> None:
        pass


def visit_table_rows(src: Path, visit: RowVisitor, *, chunk_rows: int = 4096) -> tuple[int, int]:
    """Hand every row of a word table to ``visit`` in order, in one pass over the memory-mapped file: a
    legacy pickled object array (through the restricted unpickler, rows never all in memory) or a plain 2-d
    float table (ndim reported as None). Returns (rows, dim)."""
    require_file(src)
    with src.open("rb") as f:
        shape, _, dtype = _read_npy_header(f, src)
        if dtype.hasobject:
            if len(shape) != 1 or shape[0] == 0:
                raise CorruptFileError(f"{src}: expected a 1-d object array of word vectors, found {shape}")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                mm.seek(f.tell())
                table = _VisitingTable(shape[0], path=src, visit=visit)
                if not table.run(mm):
                    raise CorruptFileError(f"{src}: the table's rows are shared or out of order")
                return table.n, table.require_dim()
    try:
        plain = np.load(src, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorruptFileError(f"{src}: not a readable .npy table ({shown(str(exc))})") from None
    if plain.ndim != 2 or len(plain) == 0:
        raise CorruptFileError(f"{src}: expected a 2-d table, found shape {plain.shape}")
    _check_row_dtype(plain.dtype, 0, src)
    for start in range(0, len(plain), chunk_rows):
        block = np.asarray(plain[start : start + chunk_rows], dtype=np.float32)
        for k, row in enumerate(block):
            visit(start + k, row, None)
    return plain.shape[0], plain.shape[1]


def _check_row_dtype(dtype: np.dtype, index: int, path: Path) -> None:
    """Rows hold numbers (legacy float32); anything else cannot be cast faithfully to float32."""
    if dtype.kind not in "biuf" or dtype.names is not None:
        raise CorruptFileError(f"{path}: row {index} has dtype {shown(str(dtype))}, expected float32 numbers")


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


DICTIONARY_MAX_BYTES = 512 << 20  # the published dictionary.txt (930,913 words) is about 10 MB


def read_dictionary(path: Path) -> list[str]:
    """``dictionary.txt``: split on b'\\n' only (Python 2 semantics), decode UTF-8, strip each word."""
    # a regular file within bounds: a symlink to /dev/zero or a FIFO must not be read until memory runs out
    data = read_bounded(
        require_file(path), max_bytes=DICTIONARY_MAX_BYTES, max_line_bytes=1 << 20, error=CorruptFileError
    )
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
