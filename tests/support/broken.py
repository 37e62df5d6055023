"""Broken and hostile legacy inputs, built in a temporary directory from the public fixtures."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np

from tests.conftest import LEGACY
from tests.support.legacy_format import npy_object_header

OE_DIR = LEGACY / "order_embedding"
ST_DIR = LEGACY / "skipthoughts_gru"


def hostile_pickle(marker: Path, *, via: str = "os") -> bytes:
    """A protocol-0 pickle whose REDUCE would create ``marker`` if anything from it ran."""
    if via == "os":
        return b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    if via == "subprocess":
        return b"csubprocess\ncall\n((S'touch'\nS'" + str(marker).encode() + b"'\nltR."
    if via == "eval":  # builtins are not on the allow-list either
        code = f"open({str(marker)!r}, 'w').close()".encode()
        return b'c__builtin__\neval\n(S"' + code + b'"\ntR.'
    raise ValueError(via)


def hostile_table(marker: Path) -> bytes:
    """An object-array .npy (legacy header) whose pickle payload would run ``os.system``."""
    return npy_object_header(3) + b"\x80\x02" + hostile_pickle(marker)


def copy_oe(tmp: Path, name: str = "oe_order_gru") -> Path:
    """A writable copy of an order-embedding fixture; returns its prefix."""
    for ext in ("npz", "pkl"):
        shutil.copy(OE_DIR / f"{name}.{ext}", tmp / f"{name}.{ext}")
    return tmp / name


def rewrite_npz(path: Path, **changes: np.ndarray | None) -> None:
    """Replace, add (array) or drop (None) members of an .npz archive."""
    with np.load(path) as z:
        params = {k: z[k] for k in z.files}
    for key, value in changes.items():
        if value is None:
            params.pop(key)
        else:
            params[key] = value
    np.savez(path, **params)


def copy_st(tmp: Path) -> Path:
    """A writable copy of the skip-thoughts gru fixture directory."""
    dst = tmp / "st"
    shutil.copytree(ST_DIR, dst)
    return dst


def truncated(data: bytes, keep: float = 0.5) -> bytes:
    return data[: int(len(data) * keep)]


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()
