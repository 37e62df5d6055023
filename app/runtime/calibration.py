"""``lnserve calibrate``: measure each recurrent state feature's peak on real text, for int8.

int8 quantises the recurrent product's left operand, the state, with one scale fixed by ``|h| <= 1``
(``onnx_graph.gemms``). Real text leaves many features well inside that range (0.7-1.0 on the demo model's
captions), so a scale per feature spreads each over every level. The peaks are measured here by the fp32
encoder itself, through the engine's own tokenisation, batching and part inputs (bi-skip's reversed
backward direction included): a tracing backend runs graphs that also output every step's state and keeps
the largest ``|h|`` of each feature over every valid step.

It has to be real text, what the model will encode: 2,048 random sequences of vocabulary words gave peaks
of 0.016-0.96 on the demo model, and clipping real sentences to those dropped a vector's cosine to fp32 to
0.848 (docs/precision.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from safetensors.numpy import save

from ...converters.artifact import Artifact, add_files, read_artifact
from ...converters.int8_calibration import PEAK_FLOOR, PEAKS_DIR, SECTION, peaks_file_name
from .engine import Engine
from .errors import EncodeInputError, OnnxModelError
from .onnx_backend import session_options
from .onnx_export import recurrent_parts
from .onnx_graph import build_recurrent_encoder_graph
from .onnx_graph.recurrent import STATES, encoder_dims

CALIBRATION_VERSION = 1
ADVISED_SIZE = 1000  # fewer sentences leave features' peaks low for other text: a warning (docs/precision.md)

log = logging.getLogger(__name__)


class StateTracer:
    """A ``Backend`` for the engine that runs the fp32 graphs with every step's state as an output and keeps
    each part's per-feature peak of ``|h|`` over the valid steps (padding steps are not the model's)."""

    name = "onnx"
    precision = "fp32"

    def __init__(self, artifact: Artifact, *, threads: int | None = None) -> None:
        self.providers = ["CPUExecutionProvider"]  # the fp32 reference, as the CPU provider computes it
        if artifact.partial_rms != 1.0:
            raise OnnxModelError(
                f"{artifact.path}: partial RMSNorm (p={artifact.partial_rms}) has no ONNX graph, so no int8 "
                "profile to calibrate"
            )
        options = session_options(threads)
        self.sessions: dict[str, ort.InferenceSession] = {}
        self.peaks: dict[str, np.ndarray] = {}
        for part, (cell, weights) in recurrent_parts(artifact).items():
            graph = build_recurrent_encoder_graph(cell, weights, every_state=True, check=False)
            self.sessions[part] = ort.InferenceSession(
                graph.SerializeToString(), options, providers=self.providers
            )
            self.peaks[part] = np.zeros(encoder_dims(weights)[1], np.float32)

    def recurrent(self, part: str, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        feeds = {"x": np.ascontiguousarray(x, np.float32), "lengths": np.ascontiguousarray(lengths, np.int64)}
        h, states = self.sessions[part].run(["h", STATES], feeds)
        valid = np.arange(states.shape[0])[:, None] < lengths[None, :]  # (T, B)
        np.maximum(self.peaks[part], np.abs(states[valid]).max(axis=0), out=self.peaks[part])
        return np.asarray(h)

    def image_projection(self, features: np.ndarray) -> np.ndarray:
        raise EncodeInputError("calibration encodes text only")


def measure_state_peaks(
    artifact: Artifact,
    sentences: Sequence[str],
    *,
    threads: int | None = None,
    batch_size: int = 128,
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """part -> per-feature peak of ``|h|`` over ``sentences`` (the model's default eos), floored at
    ``PEAK_FLOOR`` and at most 1: what ``read_state_peaks`` accepts."""
    tracer = StateTracer(artifact, threads=threads)
    Engine(artifact, tracer).encode_sentences(sentences, batch_size=batch_size, progress=progress)
    return {part: np.clip(p, PEAK_FLOOR, 1.0).astype(np.float32) for part, p in tracer.peaks.items()}


def calibrate(
    model_dir: Path,
    sentences: Sequence[str],
    *,
    texts_name: str,
    texts_sha256: str,
    threads: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Measure the peaks, write them into the artifact and record the calibration set in its manifest.

    Returns the manifest's ``int8_calibration`` section. The model's identity, and so every fp32 gallery
    pin, is unchanged; int8 pins name the new calibration (``precisions.with_precision``). Until the
    manifest is renamed into place the previous calibration stays listed and on disk: a kill or a full disk
    part way leaves a model that loads as before (at worst with an unlisted file beside it)."""
    artifact = read_artifact(Path(model_dir))
    if len(sentences) < ADVISED_SIZE:
        log.warning(
            "calibrating on %d sentences (fewer than %d): a state feature that text unlike them drives "
            "further is clipped at int8 (docs/precision.md, Calibration)",
            len(sentences),
            ADVISED_SIZE,
        )
    peaks = measure_state_peaks(artifact, sentences, threads=threads, progress=progress)
    data = save(peaks)
    name = peaks_file_name(data)
    section = {
        "version": CALIBRATION_VERSION,
        "file": name,
        "statistic": "max |h| per state feature over every valid step, floored at 1/32",
        "texts": texts_name,
        "texts_sha256": texts_sha256,
        "size": len(sentences),
    }
    # the new peaks beside the old ones; the manifest's rename switches to them; then the old ones go
    old = [f for f in artifact.manifest["files"] if f.startswith(PEAKS_DIR) and f != name]
    manifest = {
        **artifact.manifest,
        "files": {f: m for f, m in artifact.manifest["files"].items() if f not in old},
    }
    add_files(artifact.path, manifest, [(name, data)], **{SECTION: section})
    for f in old:
        (artifact.path / f).unlink(missing_ok=True)
    return section
