"""The shipped demo's data (artifact and gallery) as the service reads it: no training code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...converters.artifact import MANIFEST
from ...converters.errors import ArtifactError

DEMO_DIR = Path(__file__).resolve().parent.parent / "demo_model"


DEMO_NAME = "demo-lngru"


GALLERY_IMAGES = "gallery_images.npy"


GALLERY_PAYLOADS = "gallery_payloads.jsonl"


EVAL_JSON = "eval.json"


GALLERY_SIZE = 500  # held-out (test split) images in the demo gallery


def ensure_demo_artifact() -> Path:
    """The shipped demo artifact's directory (opening it checks its files against the manifest).

    Raises:
        ArtifactError: the package lacks the demo (run ``make demo-model``).
    """
    if not (DEMO_DIR / MANIFEST).is_file():
        raise ArtifactError(f"{DEMO_DIR}: the demo model is missing; rebuild it with `make demo-model`")
    return DEMO_DIR


def demo_gallery_data() -> tuple[np.ndarray, list[str], list[dict[str, Any]]]:
    """(features (N, dim_image), ids, payloads) of the shipped demo gallery images."""
    feats = np.load(DEMO_DIR / GALLERY_IMAGES, allow_pickle=False)
    lines = (DEMO_DIR / GALLERY_PAYLOADS).read_text(encoding="utf-8").splitlines()
    payloads = [json.loads(line) for line in lines if line]
    if len(payloads) != feats.shape[0]:
        raise ArtifactError(f"{DEMO_DIR}: {feats.shape[0]} gallery images but {len(payloads)} payloads")
    return feats, [f"test-{i}" for i in range(len(payloads))], payloads
