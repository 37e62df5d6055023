"""The fused LN-GRU step: an onnxruntime custom-op library (``lngru_step.cc``) that the install builds where a
C++ compiler exists (setup.py, an optional extension).

``fused_op_status()`` says whether it can be used here: the library file exists, onnxruntime loads it, and a
self-check on a small random cell agrees with the plain graph. Anything else (no compiler at install, a load
error, a disagreeing self-check) leaves the onnx backend on the plain graph, with the reason in the log and
in the model's description. The custom op only ever appears in graphs built in memory for serving; exported
ONNX files stay standard.
"""

from __future__ import annotations

import functools
import logging
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

log = logging.getLogger("lnserve.runtime")

DOMAIN = "ai.lnserve"
DOMAIN_VERSION = 1
LN_OP, RMS_OP = "LnGruStep", "RmsGruStep"
FUSED_CELLS = ("lngru", "rlngru")  # plain gru has no norms: nothing to fuse
SELF_CHECK_TOL = 1e-5  # the fidelity contract; the measured gap is ~2e-7


def library_path() -> Path:
    """Where the install puts the library (next to this file, named like an extension module)."""
    return Path(__file__).with_name("_lngru_step" + str(sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


@dataclass(frozen=True)
class FusedOpStatus:
    """Whether the fused step can be used, and why not."""

    library: Path
    available: bool
    reason: str = ""


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
        for cell in FUSED_CELLS:
            gap = self_check(cell, library)
            if not gap <= SELF_CHECK_TOL:  # also catches NaN
                return FusedOpStatus(library, False, f"self-check on {cell}: max |fused - plain| = {gap:.3g}")
    except Exception as exc:  # ORT raises its own pybind exception types
        return FusedOpStatus(library, False, f"{library.name} does not load: {str(exc).splitlines()[0]}")
    return FusedOpStatus(library, True)


def self_check(cell: str, library: Path, *, d: int = 64, n_in: int = 16, seed: int = 0) -> float:
    """max |fused - plain| over a small random cell, a padded batch of 70 rows (two thread-pool chunks at
    d = 64) and 7 steps."""
    from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph

    rng = np.random.default_rng(seed)
    weights = random_cell_weights(rng, cell, n_in, d)
    x = rng.standard_normal((7, 70, n_in)).astype(np.float32)
    lengths = rng.integers(1, 8, 70).astype(np.int64)
    outs = []
    for fused in (False, True):
        model = build_recurrent_encoder_graph(cell, weights, fused=fused, check=False)
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
