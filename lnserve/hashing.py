"""File digests, kept apart from the legacy readers so the runtime can verify artifacts without importing
the pickle machinery."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (word tables are gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


_digests: dict[tuple[int, int, int, int], str] = {}
_RACY_NS = 5_000_000_000


def sha256_unchanged_file(path: Path) -> str:
    """``sha256_file``, remembered for this process while the file keeps its inode, size and mtime.

    ``serve`` checks every model before it binds the port and then loads each one, which checks it again;
    without this the weights were read and hashed twice. A rewritten or replaced file misses the memo. As in
    git's "racy" rule, a file modified in the last few seconds is always hashed: mtimes advance in coarse
    ticks, so a second write in the same tick would otherwise keep the key."""
    st = path.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    digest = _digests.get(key)
    if digest is None:
        digest = sha256_file(path)
        if time.time_ns() - st.st_mtime_ns > _RACY_NS:
            _digests[key] = digest
    return digest
