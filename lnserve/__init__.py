"""lnserve: the one import package. Its subpackages live in the repository's top-level folders.

``lnserve.models`` (``models/``): the PyTorch cells and encoders; ``lnserve.converters`` (``converters/``):
legacy files in, artifacts out; ``lnserve.app`` (``app/``): the runtime, the CLI and the HTTP service.
``setup.py`` maps each subpackage to its folder, so ``pip install .`` adds only ``lnserve`` to site-packages.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lnserve")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
