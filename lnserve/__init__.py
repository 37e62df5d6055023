"""lnserve: the one import package. Its subpackages live in the repository's top-level folders.

``lnserve.models`` (``models/``): the PyTorch cells and encoders; ``lnserve.converters`` (``converters/``):
legacy files in, artifacts out; ``lnserve.app`` (``app/``): the runtime, the CLI and the HTTP service.
``setup.py`` maps each subpackage to its folder, so ``pip install .`` adds only ``lnserve`` to site-packages.

Run from a checkout (this file beside ``setup.py`` and those folders, whatever is installed), the same names
resolve to the checkout's folders (``_CheckoutFinder``): ``lnserve serve --ray`` started in the repository
with a plain ``pip install .``, or any tool that imports from the source tree, sees one package, not two.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType

SUBPACKAGES = ("app", "models", "converters")

try:
    __version__ = version("lnserve")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


class _CheckoutFinder(MetaPathFinder):
    """Finds ``lnserve.app``, ``lnserve.models`` and ``lnserve.converters`` in the checkout's top-level
    folders (their own modules then follow from the subpackage's ``__path__``)."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in SUBPACKAGES:
            return None
        return PathFinder.find_spec(fullname, [self.root])


def _checkout_root() -> Path | None:
    """The repository root when this package is the checkout's ``lnserve/`` folder (not an install, where
    the subpackages sit inside this folder)."""
    here = Path(__file__).resolve().parent
    root = here.parent
    if any((here / sub).is_dir() for sub in SUBPACKAGES) or not (root / "setup.py").is_file():
        return None
    if not all((root / sub / "__init__.py").is_file() for sub in SUBPACKAGES):
        return None
    return root


_root = _checkout_root()
if _root is not None and not any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _CheckoutFinder(_root))
