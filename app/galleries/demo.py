"""The demo gallery: held-out images of the synthetic world, embedded by the shipped demo model.

``install_demo_gallery(store)`` creates gallery ``demo-images`` when it is absent (or was built by an older
demo model) and returns its info; the service calls it at startup when it serves the demo model.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from lnserve.app.galleries.errors import GalleryNotFoundError
from lnserve.app.galleries.store import GalleryInfo, GalleryStore, ModelRef

log = logging.getLogger("lnserve.galleries")

DEMO_GALLERY = "demo-images"


def install_demo_gallery(store: GalleryStore, *, engine: Any = None) -> GalleryInfo:
    """Ensure ``demo-images`` holds the shipped gallery images embedded by the demo model.

    Args:
        store: the service's gallery store.
        engine: an ``Engine`` already serving the demo model (default: open it with the default backend).

    Returns:
        The gallery's info. A gallery of that name made by a model other than the demo is left alone.
    """
    from lnserve.app.runtime.engine import DEFAULT_BACKEND, Engine, open_backend
    from lnserve.app.training.demo import DEMO_NAME, demo_gallery_data, ensure_demo_artifact
    from lnserve.converters.artifact import read_artifact

    artifact = engine.artifact if engine is not None else read_artifact(ensure_demo_artifact())
    ref = ModelRef.from_artifact(artifact)
    feats, ids, payloads = demo_gallery_data()
    info = None
    with contextlib.suppress(GalleryNotFoundError):
        info = store.get(DEMO_GALLERY)
    if info is not None:
        if info.model_sha256 == ref.sha256 and info.count == len(ids):
            return info
        if info.model != DEMO_NAME:
            log.warning("gallery %s belongs to model %s: not replacing it", DEMO_GALLERY, info.model)
            return info
        store.remove(DEMO_GALLERY)  # built by an older demo model, or left half-built
    if engine is None:  # only now: an up-to-date gallery (every start but the first) needs no engine
        engine = Engine(artifact, open_backend(artifact, DEFAULT_BACKEND))
    store.create(DEMO_GALLERY, kind="images", model=ref)
    store.add_items(DEMO_GALLERY, engine.encode_images(feats), ids=ids, payloads=payloads)
    return store.get(DEMO_GALLERY)
