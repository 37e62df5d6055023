"""The optional extras (``pip install 'lnserve[torch]'``...): which import each one brings, and the one-line
error a command gives when its extra is not installed.

The core install serves, converts, exports, pulls, encodes with onnxruntime and keeps galleries; torch,
scikit-learn, scipy and Ray come with extras (pyproject.toml). A command that needs one checks it with
``require`` before it reads or writes anything, so that a missing extra is ``missing_extra`` (exit 2) and
names the ``pip install`` that fixes it, never an ``ImportError`` deep in a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from lnserve.errors import MissingExtraError

# extra -> what it is for (the message's tail); the packages are pyproject.toml's
EXTRAS: dict[str, str] = {
    "torch": "the PyTorch modules, training and the torch backend",
    "eval": "lnserve eval skip-thoughts (scikit-learn, scipy and torch)",
    "ray": "lnserve serve --ray (Ray Serve)",
}


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module``, imported; ``MissingExtraError`` (naming ``extra``) when it is not installed. ``what`` says
    who needs it ("the torch backend", "task sick-r")."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if _is_absent(module, exc):
            raise MissingExtraError(what, module, extra) from None
        raise


def require_installed(module: str, extra: str, what: str) -> None:
    """``require`` without importing ``module``: for a top-level package that reads its settings from the
    environment when it is imported (Ray: ``RAY_DEDUP_LOGS``...), which its caller sets afterwards."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}")
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(what, module, extra)


def _is_absent(module: str, exc: ImportError) -> bool:
    """The module (or its top-level package) is not there, as opposed to installed but failing to import
    (a broken dependency of its own: that is a real error, shown as one)."""
    top = module.split(".")[0]
    return exc.name in (module, top) or sys.modules.get(top, ...) is None
