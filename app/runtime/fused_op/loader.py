"""Loading the fused LN-GRU step into onnxruntime sessions, and the self-check that gates its use."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ..onnx_graph import build_recurrent_encoder_graph
from . import FUSED_CELLS, OP_VERSION, SELF_CHECK_TOL, FusedOpStatus, library_path


def op_version(library: Path) -> int:
    """Which ops the library holds (``LnserveFusedOpVersion``; 1: built before the sequence op)."""
    query = getattr(ctypes.CDLL(str(library)), "LnserveFusedOpVersion", None)
    if query is None:
        return 1
    query.restype = ctypes.c_int
    return int(query())


def code_path(library: Path) -> str:
    """Which clone of the fused step's row loop runs on this CPU (x86-64-v4 / v3 / baseline), as the library
    itself resolves it; "unknown" for a library without the query (built before issue 24)."""
    lib = ctypes.CDLL(str(library))
    query = getattr(lib, "LnserveFusedStepCodePath", None)
    if query is None:
        return "unknown"
    query.restype = ctypes.c_char_p
    return str(query().decode())


def register(options: ort.SessionOptions, library: Path) -> None:
    """Make the custom ops known to sessions made with ``options`` (raises if the library does not load)."""
    options.register_custom_ops_library(str(library))


def fused_op_status(library: Path | None = None) -> FusedOpStatus:
    """Probe the library once per path and process (~0.1 s once: two small sessions per cell type)."""
    return _probe(library or library_path())


@functools.cache
def _probe(library: Path) -> FusedOpStatus:
    if not library.is_file():
        return FusedOpStatus(library, False, f"{library.name} was not built (no C++ compiler at install?)")
    try:
        if code_path(library) == "unknown" or op_version(library) < OP_VERSION:  # built from older sources
            return FusedOpStatus(
                library,
                False,
                f"{library.name} was built from an older lngru_step.cc: rebuild it (pip install .)",
            )
        for cell in FUSED_CELLS:
            for sequence_op in (False, True):
                gap = self_check(cell, library, sequence_op=sequence_op)
                if not gap <= SELF_CHECK_TOL:  # also catches NaN
                    form = "sequence" if sequence_op else "step"
                    why = f"self-check of the {form} op on {cell}: max |fused - plain| = {gap:.3g}"
                    return FusedOpStatus(library, False, why)
    except Exception as exc:  # ORT raises its own pybind exception types
        return FusedOpStatus(library, False, f"{library.name} does not load: {str(exc).splitlines()[0]}")
    return FusedOpStatus(library, True)


def self_check(
    cell: str, library: Path, *, d: int = 64, n_in: int = 16, seed: int = 0, sequence_op: bool = False
) -> float:
    """max |fused - plain| over a small random cell, a padded batch of 70 rows (two thread-pool chunks of the
    step op at d = 64) and 7 steps; ``sequence_op``: the whole-sequence op instead of the step op."""
    rng = np.random.default_rng(seed)
    weights = random_cell_weights(rng, cell, n_in, d)
    x = rng.standard_normal((7, 70, n_in)).astype(np.float32)
    lengths = rng.integers(1, 8, 70).astype(np.int64)
    outs = []
    for fused in (False, True):
        model = build_recurrent_encoder_graph(
            cell, weights, fused=fused, sequence_op=fused and sequence_op, check=False
        )
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if fused:
            register(options, library)
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        outs.append(session.run(["h"], {"x": x, "lengths": lengths})[0])
    return float(np.max(np.abs(outs[0] - outs[1])))


def random_cell_weights(rng: np.random.Generator, cell: str, n_in: int, d: int) -> dict[str, np.ndarray]:
    """A GRU-family cell's weights in module naming, scaled like trained ones (norm gains around 1)."""

    def normal(*shape: int, scale: float = 1.0, loc: float = 0.0) -> np.ndarray:
        return (loc + scale * rng.standard_normal(shape)).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "weight_ih": normal(3 * d, n_in, scale=n_in**-0.5),
        "bias_ih": normal(3 * d, scale=0.1),
        "weight_hh": normal(3 * d, d, scale=d**-0.5),
    }
    for name in ("norm_ih_ru", "norm_ih_c", "norm_hh_ru", "norm_hh_c"):
        size = d if name.endswith("_c") else 2 * d
        w[f"{name}.weight"] = normal(size, scale=0.1, loc=1.0)
        if cell == "lngru":
            w[f"{name}.bias"] = normal(size, scale=0.1)
    return w
