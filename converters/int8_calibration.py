"""An artifact's int8 calibration: each recurrent part's per-feature state peaks, measured on real text by
``lnserve calibrate`` (``app.runtime.calibration``) and read back here, checked as a stranger's file.

The peaks live in ``int8/state_peaks.safetensors`` (one float32 vector of length d per recurrent part) and
the manifest's ``int8_calibration`` section records what they were measured on (the text file's name,
sha256 and the number of sentences). They change int8 vectors only, so they are left out of the model
identity (an fp32 gallery stays valid when a model is calibrated) and enter the int8 profile's pin instead
(``calibration_tag``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from lnserve.errors import brief

from .artifact import MANIFEST, Artifact
from .errors import ManifestMismatchError

SECTION = "int8_calibration"
PEAKS_FILE = "int8/state_peaks.safetensors"
PEAK_FLOOR = 1.0 / 32  # a feature that barely moves keeps a range of a few levels, never a division by 0
TAG_HEX = 16  # hex digits of the peaks file's sha256 in the int8 pin: ``<identity>:int8@<tag>``


def calibration_tag(manifest: Mapping[str, Any]) -> str | None:
    """The first ``TAG_HEX`` hex digits of the recorded peaks file's sha256, or None if uncalibrated.

    ``read_artifact`` has checked the file against that sha256, so the tag names the peaks in use."""
    if SECTION not in manifest:
        return None
    meta = (manifest.get("files") or {}).get(PEAKS_FILE)
    digest = meta.get("sha256") if isinstance(meta, Mapping) else None
    if not isinstance(digest, str) or len(digest) != 64 or set(digest) - set("0123456789abcdef"):
        raise ManifestMismatchError(
            f"{MANIFEST}: {SECTION} is present but {PEAKS_FILE} is not listed with a sha256 in files"
        )
    return digest[:TAG_HEX]


def read_state_peaks(artifact: Artifact, dims: Mapping[str, int]) -> dict[str, np.ndarray] | None:
    """part -> peaks (d,) float32 for the recurrent parts ``dims`` (part -> d), or None if uncalibrated.

    Everything is checked, not only the names: the file is the one the manifest lists (hash-checked on
    open), it holds exactly these parts, each a finite float32 vector of its part's width with every peak
    in [``PEAK_FLOOR``, 1] (a crafted peak of 1e-30 would turn every state into a saturated code).
    """
    if calibration_tag(artifact.manifest) is None:
        return None
    where = artifact.path / PEAKS_FILE
    section = artifact.manifest[SECTION]
    if not isinstance(section, Mapping) or section.get("file") != PEAKS_FILE:
        raise ManifestMismatchError(
            f"{artifact.path / MANIFEST}: {SECTION}.file must be {PEAKS_FILE!r}, "
            f"got {brief(section.get('file') if isinstance(section, Mapping) else section, 60)}"
        )
    try:
        stored = load_file(str(where))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ManifestMismatchError(f"{where}: unreadable int8 calibration ({exc})") from None
    if set(stored) != set(dims):
        raise ManifestMismatchError(
            f"{where}: calibrates parts {sorted(stored)}, the model has {sorted(dims)}"
        )
    peaks = {}
    for part, d in dims.items():
        p = stored[part]
        if p.dtype != np.float32 or p.shape != (d,):
            raise ManifestMismatchError(f"{where}: {part} is {p.dtype} {p.shape}, expected float32 ({d},)")
        if not (np.isfinite(p).all() and p.min() >= PEAK_FLOOR and p.max() <= 1.0):
            raise ManifestMismatchError(
                f"{where}: {part}'s peaks must be finite and within [{PEAK_FLOOR}, 1] (a state's range)"
            )
        peaks[part] = p
    return peaks
