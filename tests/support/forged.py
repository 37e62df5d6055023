"""Forged NumPy pickles and hostile archives, built cheaply in memory for the hardening tests.

The pickles use only allow-listed globals (``numpy.dtype``, ``_reconstruct``, ``numpy.ndarray``), so a name
check alone admits them; what makes them hostile is the *state* they hand to NumPy (see issue 10).
"""

from __future__ import annotations

import pickle
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.broken import OE_DIR
from tests.support.legacy_format import npy_object_header

_RECONSTRUCT = np._core.multiarray._reconstruct  # type: ignore[attr-defined]


class Reduce:
    """Pickles as the given ``__reduce__`` tuple, whatever it says."""

    def __init__(self, *reduce: Any) -> None:
        self.reduce = reduce

    def __reduce__(self) -> tuple[Any, ...]:
        return self.reduce


def dtype(spec: str, state: tuple[Any, ...]) -> Reduce:
    """``numpy.dtype(spec)`` followed by BUILD with ``state``."""
    return Reduce(np.dtype, (spec, False, True), state)


def forged_object_dtype() -> Reduce:
    """A void dtype whose state claims an object field at offset 0 but flags 0 (no 'has objects' flag)."""
    return dtype("V8", (3, "|", None, ("f",), {"f": (np.dtype("O"), 0)}, 8, 1, 0))


def subarray_dtype() -> Reduce:
    """A void dtype of 8 bytes whose state claims a subarray of 2**40 float32."""
    return dtype("V8", (3, "|", (np.dtype("f4"), (1 << 40,)), None, None, 8, 4, 0))


def array(dt: Any, data: str | list[Any], shape: tuple[int, ...] = ()) -> Reduce:
    """``_reconstruct(ndarray, (0,), 'b')`` followed by BUILD with ``(1, shape, dt, False, data)``."""
    return Reduce(_RECONSTRUCT, (np.ndarray, (0,), "b"), (1, shape, dt, False, data))


def forged_array() -> Reduce:
    """The issue-10 value: a 0-d array of the forged dtype over the bytes 'AAAAAAAA' (pointer 0x4141...)."""
    return array(forged_object_dtype(), "AAAAAAAA")


def dumps(obj: Any) -> bytes:
    """Protocol 0, like the legacy files (str data, so no ``_codecs.encode`` global is needed)."""
    return pickle.dumps(obj, protocol=0)


def oe_pickle(*, options: dict[str, Any] | None = None, worddict: dict[str, Any] | None = None) -> bytes:
    """The fixture's ``{'options', 'worddict'}`` with some entries replaced."""
    with (OE_DIR / "oe_order_gru.pkl").open("rb") as f:
        legit = pickle.load(f, encoding="latin1")  # trusted fixture
    return dumps(
        {
            "options": {**legit["options"], **(options or {})},
            "worddict": {**legit["worddict"], **(worddict or {})},
        }
    )


def deep_list_pickle(depth: int) -> bytes:
    """``[[[...]]]`` nested ``depth`` deep (EMPTY_LIST ... APPEND)."""
    return b"]" * depth + b"a" * (depth - 1) + b"."


def deep_tuple_key_pickle(depth: int) -> bytes:
    """``{((...),): 1}``: a dict whose key is a tuple nested ``depth`` deep (hashing it recurses in C)."""
    return b"}" + b")" + b"\x85" * depth + b"K\x01s."


def table_with_row(row: Reduce, n: int = 3) -> bytes:
    """A legacy object-array ``.npy`` of ``n`` rows, all the given (pickled) row."""
    outer = array(np.dtype("O"), [row] * n, shape=(n,))
    return npy_object_header(n) + pickle.dumps(outer, protocol=2)


# -- zip archives -------------------------------------------------------------------------------------
@dataclass
class Member:
    """One zip member as it goes on disk: ``data`` already compressed when ``method`` is 8 (deflate)."""

    name: str
    data: bytes
    file_size: int
    crc: int
    method: int = 0


def stored(name: str, payload: bytes) -> Member:
    return Member(name, payload, len(payload), zlib.crc32(payload))


def deflate_bomb(
    name: str, prefix: bytes, zeros: int, *, declared: int | None = None, crc: int | None = None
) -> Member:
    """``prefix`` then ``zeros`` zero bytes, deflated (about 1000:1) without ever holding them in memory.

    One 1 MiB block of zeros is compressed once and repeated after a full flush, which resets the stream,
    so each repetition is a valid continuation. ``declared`` overrides the uncompressed size written in
    the headers (a lie about the size); ``crc`` skips computing the real CRC (a member never read whole).
    """
    block = 1 << 20
    full, rest = divmod(zeros, block)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = comp.compress(prefix) + comp.flush(zlib.Z_FULL_FLUSH)
    body = comp.compress(bytes(block)) + comp.flush(zlib.Z_FULL_FLUSH) if full else b""
    tail = comp.compress(bytes(rest)) + comp.flush()
    if crc is None:
        crc = zlib.crc32(prefix)
        for _ in range(full):
            crc = zlib.crc32(bytes(block), crc)
        crc = zlib.crc32(bytes(rest), crc)
    size = len(prefix) + zeros if declared is None else declared
    return Member(name, head + body * full + tail, size, crc, method=8)


def write_zip(path: Path, members: Iterable[Member]) -> None:
    """A plain zip with exactly these members, duplicates and odd names included (zip64 sizes above 4 GiB)."""
    out, central = bytearray(), bytearray()
    count = 0
    for m in members:
        name = m.name.encode("utf-8")
        big = m.file_size >= 0xFFFFFFFF
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if big else (len(m.data), m.file_size)
        extra = struct.pack("<HHQQ", 1, 16, m.file_size, len(m.data)) if big else b""
        fields = struct.pack("<HHHHHIII", 45 if big else 20, 0x800, m.method, 0, 0x21, m.crc, *sizes)
        central += b"PK\x01\x02" + struct.pack("<H", 45) + fields
        central += struct.pack("<HHHHHII", len(name), len(extra), 0, 0, 0, 0, len(out)) + name + extra
        out += b"PK\x03\x04" + fields + struct.pack("<HH", len(name), len(extra)) + name + extra + m.data
        count += 1
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(central), len(out), 0)
    path.write_bytes(bytes(out + central + end))


def npz_members(path: Path) -> list[Member]:
    """The members of an existing (stored) ``.npz``, to rebuild it with additions."""
    import zipfile

    with zipfile.ZipFile(path) as zf:
        return [stored(i.filename, zf.read(i)) for i in zf.infolist()]


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """The ``.npy`` v1.0 header NumPy writes for ``shape`` and ``descr``."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()
