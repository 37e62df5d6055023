"""Telling an out-of-space write from other I/O failures, wherever it surfaces (Python, SQLite, or a Rust
library such as safetensors that only quotes the OS error in its message)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
from collections.abc import Iterator

from lnserve.errors import StorageFullError

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_QUOTED_OS_ERROR = re.compile(r"os error (\d+)")
# SQLite's write failures that it reports as I/O errors even when the cause is a full disk: sizing the
# shared-memory index of a WAL database (done by every connection that opens one, readers too) or a write
# that failed part-way. They mean "full" only when the file system is (nearly) full: see ``_nearly_full``.
_SQLITE_WRITE_IOERRS = frozenset({778, 1034, 1546, 4874})  # IOERR_WRITE, _FSYNC, _TRUNCATE, _SHMSIZE
_NEARLY_FULL_BYTES = 1 << 20


def storage_full(
    exc: BaseException, where: str, path: str | os.PathLike[str] | None = None
) -> StorageFullError | None:
    """``StorageFullError`` naming ``where`` when ``exc`` is a failed write for lack of space, else None.
    ``path``: where the write went, for SQLite's I/O errors, which carry no errno (a full disk when the file
    system holding ``path`` has under 1 MiB free)."""
    code_sqlite = (
        getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.OperationalError) else None
    )
    sqlite_full = code_sqlite == sqlite3.SQLITE_FULL or (
        code_sqlite in _SQLITE_WRITE_IOERRS and path is not None and _nearly_full(path)
    )
    if sqlite_full:
        reason = "database or disk is full"
    else:
        code = exc.errno if isinstance(exc, OSError) else None
        if code is None and (quoted := _QUOTED_OS_ERROR.search(str(exc))):
            code = int(quoted.group(1))
        if code not in _NO_SPACE:
            return None
        reason = os.strerror(code)
    return StorageFullError(
        f"{where}: {reason}; the write was abandoned (nothing of it is kept), free space and retry"
    )


def _nearly_full(path: str | os.PathLike[str]) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _NEARLY_FULL_BYTES


@contextlib.contextmanager
def out_of_space_reported(where: str, path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Re-raise an out-of-space failure inside the block as ``StorageFullError`` naming ``where`` (``path``:
    where the block writes, see ``storage_full``); any other error passes unchanged."""
    try:
        yield
    except (OSError, sqlite3.OperationalError) as exc:
        if (full := storage_full(exc, where, path)) is not None:
            raise full from None
        raise
