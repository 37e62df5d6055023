"""An artifact's int8 calibration: each recurrent part's per-feature state peaks, measured on real text by
``lnserve calibrate`` (``app.runtime.calibration``) and read back here, checked as a stranger's file.

The peaks live in ``int8/state_peaks-<tag>.safetensors`` (one float32 vector of length d per recurrent
part; the tag begins the file's sha256) and the manifest's ``int8_calibration`` section names that file and
records what the peaks were measured on (the text file's name, sha256 and the number of sentences).
They change int8 vectors only, so they are left out of the model identity (an fp32 gallery stays valid
when a model is calibrated) and enter the int8 profile's pin instead (``calibration_tag``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from lnserve.errors import brief

from .artifact import MANIFEST, Artifact
from .errors import ManifestMismatchError

SECTION = "int8_calibration"
PEAKS_DIR = "int8/"
# hex digits of the peaks file's sha256 in its name and in the int8 pin: ``<identity>:int8@<tag>``
TAG_HEX = 16
PEAKS_NAME = re.compile(rf"int8/state_peaks-([0-9a-f]{{{TAG_HEX}}})\.safetensors")
PEAK_FLOOR = 1.0 / 32  # a feature that barely moves keeps a range of a few levels, never a division by 0


def peaks_file_name(data: bytes) -> str:
    """The name a peaks file is stored under: named by its content, so a new calibration is written beside
    the one in use, and only the manifest's rename switches to it (a kill or a full disk on the way leaves
    the old calibration listed and present)."""
    return f"{PEAKS_DIR}state_peaks-{hashlib.sha256(data).hexdigest()[:TAG_HEX]}.safetensors"


def peaks_file(manifest: Mapping[str, Any]) -> str | None:
    """The peaks file the manifest's calibration names, checked, or None if uncalibrated.

    ``read_artifact`` has checked a listed file against its sha256; here the name must be a peaks file's,
    listed in ``files``, whose sha256 begins with the tag its name carries."""
    if SECTION not in manifest:
        return None
    section = manifest[SECTION]
    name = section.get("file") if isinstance(section, Mapping) else None
    match = PEAKS_NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise ManifestMismatchError(
            f"{MANIFEST}: {SECTION}.file must name {PEAKS_NAME.pattern}, got {brief(name, 80)}"
        )
    meta = (manifest.get("files") or {}).get(name)
    digest = meta.get("sha256") if isinstance(meta, Mapping) else None
    if not isinstance(digest, str) or not digest.startswith(match.group(1)):
        raise ManifestMismatchError(
            f"{MANIFEST}: {SECTION} names {name}, which files does not list with the sha256 its name begins"
        )
    return name


def calibration_tag(manifest: Mapping[str, Any]) -> str | None:
    """The int8 pin's tag of the artifact's calibration (the first ``TAG_HEX`` hex digits of its peaks
    file's sha256), or None if uncalibrated."""
    name = peaks_file(manifest)
    match = None if name is None else PEAKS_NAME.fullmatch(name)
    return None if match is None else match.group(1)


def read_state_peaks(artifact: Artifact, dims: Mapping[str, int]) -> dict[str, np.ndarray] | None:
    """part -> peaks (d,) float32 for the recurrent parts ``dims`` (part -> d), or None if uncalibrated.

    Everything is checked, not only the names: the file is the one the manifest lists (hash-checked on
    open), it holds exactly these parts, each a finite float32 vector of its part's width with every peak
    in [``PEAK_FLOOR``, 1] (a crafted peak of 1e-30 would turn every state into a saturated code).
    """
    name = peaks_file(artifact.manifest)
    if name is None:
        return None
    where = artifact.path / name
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
