"""Checksums of a gallery's vector rows: recording them, verifying rows against them, finding the last
consistent state.

Every append records one CRC-32 over its rows (table ``blocks``: ``start``, ``n``, ``crc32``) in the same
SQLite transaction that acknowledges the rows, so the acknowledged rows ``[0, n_rows)`` are covered by
contiguous blocks. CRC-32 catches bit rot, torn or overwritten sectors and truncation; it is not a defence
against someone who can rewrite the database too (they could rewrite the checksums).

Rows written before checksums existed (galleries of older lnserve versions: no ``blocks`` table, or rows
past the last block) are "legacy" rows: they are checked for finite values only, and their checksums are
recorded, trusting them on first use, by the next write or the server's start-up verification.
"""

from __future__ import annotations

import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

_BLOCK_COLUMNS = "start INTEGER PRIMARY KEY, n INTEGER NOT NULL, crc32 INTEGER NOT NULL"
BLOCKS_DDL = f"CREATE TABLE IF NOT EXISTS blocks ({_BLOCK_COLUMNS})"
LEGACY_BLOCK_ROWS = 4096  # rows per checksum recorded for legacy rows
_READ_BYTES = 16 << 20  # bytes read (and hashed) at a time


@dataclass(frozen=True)
class Scan:
    """What verifying rows ``[start, n_rows)`` found.

    ``good_rows``: rows ``[0, good_rows)`` are consistent (every row, when the scan started at 0);
    ``fault``: why row ``good_rows`` is not (None: all rows are good); ``covered``: rows ``[0, covered)``
    have checksums, the rest up to ``n_rows`` are legacy rows.
    """

    good_rows: int
    fault: str | None
    covered: int


def has_blocks_table(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'blocks'").fetchone()
    return row is not None


def covered_rows(db: sqlite3.Connection) -> int:
    """End of the checksummed rows (0 for a gallery made before checksums)."""
    if not has_blocks_table(db):
        return 0
    row = db.execute("SELECT start + n FROM blocks ORDER BY start DESC LIMIT 1").fetchone()
    return int(row[0]) if row is not None else 0


def crc32_rows(data: bytes | memoryview, crc: int = 0) -> int:
    return zlib.crc32(data, crc) & 0xFFFFFFFF


def scan(db: sqlite3.Connection, path: Path, dim: int, n_rows: int, *, start: int = 0) -> Scan:
    """Verify rows from ``start`` (re-reading the whole block that contains it) up to ``n_rows``: each
    checksummed block against its CRC-32 and for finite values, then the legacy rows for finite values.
    Stops at the first fault. A missing vector file reads as empty."""
    covered = covered_rows(db)
    try:
        f: BinaryIO | None = open(path, "rb")  # noqa: SIM115  (closed below)
    except FileNotFoundError:
        f = None
    try:
        if start >= covered:  # nothing checksummed left to verify
            bad_row, fault = _check_legacy(f, start, n_rows, dim)
            return Scan(bad_row, fault, covered)
        first = db.execute(
            "SELECT start FROM blocks WHERE start <= ? ORDER BY start DESC LIMIT 1", (start,)
        ).fetchone()
        pos = int(first[0]) if first is not None and isinstance(first[0], int) else 0
        for b_start, b_n, crc in db.execute(
            "SELECT start, n, crc32 FROM blocks WHERE start >= ? ORDER BY start", (pos,)
        ):
            fault = _block_fault(f, pos, b_start, b_n, crc, n_rows, 4 * dim)
            if fault is not None:
                return Scan(pos, fault, covered)
            pos = b_start + b_n
        bad_row, fault = _check_legacy(f, pos, n_rows, dim)
        return Scan(bad_row, fault, covered)
    finally:
        if f is not None:
            f.close()


def _block_fault(
    f: BinaryIO | None, pos: int, start: object, n: object, crc: object, n_rows: int, row_bytes: int
) -> str | None:
    """Why the block ``(start, n, crc)`` expected at row ``pos`` is not consistent, or None."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, n, crc)):
        return f"the checksum record of rows from {start!r} is malformed"
    assert isinstance(start, int) and isinstance(n, int) and isinstance(crc, int)
    if start != pos:
        return f"rows {pos}-{start - 1} have no checksum (a checksum record is missing)"
    rows = f"rows {start}-{start + n - 1}"
    if n < 1 or start + n > n_rows:
        return f"a checksum covers {rows}, beyond the {n_rows} acknowledged rows"
    if f is None:
        return f"vectors.f32 is missing ({n_rows} rows are acknowledged)"
    f.seek(start * row_bytes)
    left, got, finite = n * row_bytes, 0, True
    while left > 0:
        chunk = f.read(min(left, _READ_BYTES))
        if not chunk:
            break
        got = crc32_rows(chunk, got)
        finite = finite and bool(np.isfinite(np.frombuffer(chunk, "<f4", count=len(chunk) // 4)).all())
        left -= len(chunk)
    if left > 0:
        return f"vectors.f32 ends inside {rows} (truncated below the acknowledged rows)"
    if got != crc & 0xFFFFFFFF:
        return f"{rows} do not match their checksum (bit rot or outside modification)"
    if not finite:
        return f"{rows} hold non-finite values"
    return None


def _check_legacy(f: BinaryIO | None, start: int, n_rows: int, dim: int) -> tuple[int, str | None]:
    """(first bad row, why) among legacy rows ``[start, n_rows)``, or ``(n_rows, None)``."""
    if start >= n_rows:
        return n_rows, None
    if f is None:
        return start, f"vectors.f32 is missing ({n_rows} rows are acknowledged)"
    row_bytes = 4 * dim
    step = max(1, _READ_BYTES // row_bytes)
    f.seek(start * row_bytes)
    for first in range(start, n_rows, step):
        want = min(step, n_rows - first)
        data = f.read(want * row_bytes)
        full = len(data) // row_bytes
        rows = np.frombuffer(data[: full * row_bytes], "<f4").reshape(full, dim)
        bad = ~np.isfinite(rows).all(axis=1)
        if bad.any():
            row = first + int(np.argmax(bad))
            return row, f"row {row} holds non-finite values"
        if full < want:
            return first + full, f"vectors.f32 ends at row {first + full}; {n_rows} rows are acknowledged"
    return n_rows, None


def legacy_blocks(path: Path, dim: int, start: int, n_rows: int) -> list[tuple[int, int, int]]:
    """``(start, n, crc32)`` for legacy rows ``[start, n_rows)`` (already verified finite), in fixed-size
    blocks whose last one ends at ``n_rows``."""
    row_bytes = 4 * dim
    out = []
    with open(path, "rb") as f:
        f.seek(start * row_bytes)
        for first in range(start, n_rows, LEGACY_BLOCK_ROWS):
            n = min(LEGACY_BLOCK_ROWS, n_rows - first)
            out.append((first, n, crc32_rows(f.read(n * row_bytes))))
    return out
