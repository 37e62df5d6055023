"""Telling an out-of-space write from other I/O failures, wherever it surfaces (Python, SQLite, or a Rust
library such as safetensors that only quotes the OS error in its message)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
from collections.abc import Iterator

from lnserve.converters.errors import StorageFullError

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_QUOTED_OS_ERROR = re.compile(r"os error (\d+)")


def storage_full(exc: BaseException, where: str) -> StorageFullError | None:
    """``StorageFullError`` naming ``where`` when ``exc`` is a failed write for lack of space, else None."""
    if (
        isinstance(exc, sqlite3.OperationalError)
        and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    ):
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


@contextlib.contextmanager
def out_of_space_reported(where: str) -> Iterator[None]:
    """Re-raise an out-of-space failure inside the block as ``StorageFullError`` naming ``where``; any other
    error passes unchanged."""
    try:
        yield
    except (OSError, sqlite3.OperationalError) as exc:
        if (full := storage_full(exc, where)) is not None:
            raise full from None
        raise
