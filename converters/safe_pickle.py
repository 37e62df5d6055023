"""A restricted unpickler for the legacy Python 2 pickles: only the globals these files need can load.

Nothing outside the allow-list is ever imported or called, so a pickle whose REDUCE would run code is
refused before it runs. Python 2 ``str`` values come back through ``encoding='latin1'``; ``py2_text``
recovers the UTF-8 text they held.
"""

from __future__ import annotations

import collections
import io
import pickle
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from lnserve.converters.errors import CorruptFileError, UnsafePickleError

_NP_RECONSTRUCT = np._core.multiarray._reconstruct  # type: ignore[attr-defined]

_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("numpy.core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler whose ``find_class`` answers only from ``_ALLOWED``.

    ``overrides`` may swap the object behind an allowed name (the streaming table reader replaces
    ``_reconstruct``) but can never admit a name outside the allow-list.
    """

    def __init__(
        self, stream: IO[bytes], *, overrides: Mapping[tuple[str, str], Any] | None = None, **kw: Any
    ) -> None:
        super().__init__(stream, **kw)
        unknown = set(overrides or ()) - set(_ALLOWED)
        if unknown:
            raise ValueError(f"overrides must name allowed globals, got {sorted(unknown)}")
        self._globals = {**_ALLOWED, **(overrides or {})}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._globals[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"refusing to unpickle global '{module}.{name}': "
                "not on the allow-list of legacy checkpoint types"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("refusing to unpickle a persistent id")


def safe_load(
    stream: IO[bytes], *, source: str, overrides: Mapping[tuple[str, str], Any] | None = None
) -> Any:
    """Unpickle one object from ``stream`` with the allow-list and latin1 strings."""
    try:
        return RestrictedUnpickler(stream, overrides=overrides, encoding="latin1").load()
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{source}: {exc}") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
    ) as exc:
        raise CorruptFileError(
            f"{source}: not a readable legacy pickle ({type(exc).__name__}: {exc})"
        ) from None


def safe_loads(data: bytes, *, source: str) -> Any:
    return safe_load(io.BytesIO(data), source=source)


def py2_text(value: str) -> str:
    """Recover the UTF-8 text of a Python 2 byte string that was decoded as latin1."""
    try:
        return value.encode("latin1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def py2_strings(obj: Any) -> Any:
    """Apply ``py2_text`` to every string key and value of nested dicts / lists (order kept)."""
    if isinstance(obj, str):
        return py2_text(obj)
    if isinstance(obj, dict):
        return type(obj)((py2_strings(k), py2_strings(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [py2_strings(v) for v in obj]
    return obj
