"""Writers for the legacy Python 2 on-disk formats, byte for byte, for tests and benchmarks.

``write_legacy_table`` emits what Python 2.7 ``numpy.save(path, list_of_arrays)`` wrote for the skip-thoughts
``utable.npy`` / ``btable.npy``: a v1.0 header with ``'|O8'`` and a protocol-2 cPickle of a 1-d object
array whose rows are float32 arrays with their data as Python 2 ``str`` (SHORT_BINSTRING / BINSTRING). It
reproduces the public fixture tables exactly (see tests/unit/converters/test_legacy_files.py), so larger
synthetic tables are faithful too. It streams: rows are produced and written one at a time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

_DTYPE_STATE_TAIL = b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xff"  # (..., None, None, None, -1, -1, flags)


def _int(v: int) -> bytes:
    """cPickle save_int for protocol >= 1."""
    if 0 <= v < 0x100:
        return b"K" + bytes([v])
    if 0 <= v < 0x10000:
        return b"M" + struct.pack("<H", v)
    return b"J" + struct.pack("<i", v)


def _str(data: bytes) -> bytes:
    """A Python 2 ``str``: SHORT_BINSTRING below 256 bytes, BINSTRING above."""
    if len(data) < 0x100:
        return b"U" + bytes([len(data)]) + data
    return b"T" + struct.pack("<i", len(data)) + data


def _put(i: int) -> bytes:
    return b"q" + bytes([i]) if i < 0x100 else b"r" + struct.pack("<I", i)


def _get(i: int) -> bytes:
    return b"h" + bytes([i]) if i < 0x100 else b"j" + struct.pack("<I", i)


def _shape(shape: tuple[int, ...]) -> bytes:
    return b"".join(_int(s) for s in shape) + {1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(shape)]


def npy_object_header(n: int) -> bytes:
    """numpy 1.x ``format.write_array_header_1_0`` for a 1-d object array of ``n`` items."""
    text = f"{{'descr': '|O8', 'fortran_order': False, 'shape': ({n},), }}"
    pad = 16 - (10 + len(text) + 1) % 16
    text = text + " " * (pad % 16) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def write_legacy_table_stream(f: BinaryIO, rows: Iterable[np.ndarray], n: int) -> None:
    """Write ``n`` rows (float32, shape (d,) or (1, d)) as Python 2 numpy.save of a list of arrays."""
    f.write(npy_object_header(n))
    f.write(b"\x80\x02")
    f.write(b"cnumpy.core.multiarray\n_reconstruct\n" + _put(1) + b"cnumpy\nndarray\n" + _put(2))
    f.write(b"K\x00\x85U\x01b\x87R" + _put(3))  # the outer array
    f.write(b"(K\x01" + _int(n) + b"\x85cnumpy\ndtype\n" + _put(4) + b"U\x02O8K\x00K\x01\x87R" + _put(5))
    f.write(b"(K\x03U\x01|" + _DTYPE_STATE_TAIL + b"K?tb\x89]" + _put(6))
    memo, f4_memo, count = 7, 0, 0
    batch_open = False
    for row in rows:
        if count % 1000 == 0:
            f.write(b"(")  # cPickle batches list items by 1000: MARK ... APPENDS
            batch_open = True
        arr = np.asarray(row, dtype="<f4")
        f.write(b"h\x01h\x02K\x00\x85U\x01b\x87R" + _put(memo))
        memo += 1
        f.write(b"(K\x01" + _shape(arr.shape))
        if not f4_memo:
            f4_memo = memo
            f.write(_get(4) + b"U\x02f4K\x00K\x01\x87R" + _put(f4_memo))
            f.write(b"(K\x03U\x01<" + _DTYPE_STATE_TAIL + b"K\x00tb")
            memo += 1
        else:
            f.write(_get(f4_memo))
        f.write(b"\x89" + _str(arr.tobytes()) + b"tb")
        count += 1
        if count % 1000 == 0:
            f.write(b"e")
            batch_open = False
    if batch_open:
        f.write(b"e")
    if count != n:
        raise ValueError(f"{count} rows written, header says {n}")
    f.write(b"tb.")


def write_legacy_table(path: Path, rows: Iterable[np.ndarray], n: int) -> None:
    with path.open("wb") as f:
        write_legacy_table_stream(f, rows, n)
