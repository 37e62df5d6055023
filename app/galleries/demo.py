"""The demo gallery: held-out images of the synthetic world, embedded by the shipped demo model.

``install_demo_gallery(store)`` creates gallery ``demo-images`` when it is absent (or was built by an older
demo model) and returns its info; the service calls it at startup when it serves the demo model.
``shipped_demo()`` is the service's one door into ``lnserve.app.training`` (which produces the demo).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime.model_ref import ModelRef
from ..runtime.precisions import EXACT, pinned_precision
from .errors import GalleryNotFoundError
from .layout import GalleryInfo
from .protocol import GalleryStoreAPI

log = logging.getLogger("lnserve.galleries")

DEMO_GALLERY = "demo-images"


@dataclass(frozen=True)
class ShippedDemo:
    """The demo model shipped as package data: its artifact directory, its name, its gallery's data."""

    path: Path
    name: str
    gallery_data: Callable[[], tuple[np.ndarray, list[str], list[dict[str, Any]]]]


def shipped_demo() -> ShippedDemo:
    """The only place the service imports training code (lazily, and only when it serves the demo).

    Raises:
        ArtifactError: the package lacks the demo (run ``make demo-model``).
    """
    from ..demo_model import data as demo

    return ShippedDemo(demo.ensure_demo_artifact(), demo.DEMO_NAME, demo.demo_gallery_data)


def install_demo_gallery(
    store: GalleryStoreAPI, *, engine: Any = None, precision: str = EXACT
) -> GalleryInfo:
    """Ensure ``demo-images`` holds the shipped gallery images embedded by the demo model.

    Args:
        store: the service's gallery store.
        engine: an ``Engine`` already serving the demo model (default: open it with the default backend).
        precision: the profile the service serves the demo at (without ``engine``): the gallery pins the
            precision of its image vectors (``runtime.precisions.pinned_precision``: float32 but at fp16),
            and is made in it, so that the server can search it.

    Returns:
        The gallery's info. A gallery of that name made by a model other than the demo is left alone.
    """
    from ...converters.artifact import read_artifact
    from ..runtime.engine import DEFAULT_BACKEND, Engine, open_backend

    demo = shipped_demo()
    artifact = engine.artifact if engine is not None else read_artifact(demo.path)
    ref = engine.model_ref() if engine is not None else ModelRef.from_artifact(artifact, precision)
    feats, ids, payloads = demo.gallery_data()
    info = None
    with contextlib.suppress(GalleryNotFoundError):
        info = store.get(DEMO_GALLERY)
    if info is not None:
        if ref.matches(info) and info.count == len(ids):
            return info
        if info.model != demo.name:
            log.warning("gallery %s belongs to model %s: not replacing it", DEMO_GALLERY, info.model)
            return info
        store.remove(DEMO_GALLERY)  # built by an older demo model, or left half-built
    if engine is None:  # only now: an up-to-date gallery (every start but the first) needs no engine
        images_at = pinned_precision(ref.precision, "images")  # fp32 for int8 / bf16: no int8 graph to build
        engine = Engine(artifact, open_backend(artifact, DEFAULT_BACKEND, precision=images_at))
    store.create(DEMO_GALLERY, kind="images", model=ref)
    store.add(DEMO_GALLERY, engine.encode_images(feats), ids=ids, payloads=payloads)
    return store.get(DEMO_GALLERY)
