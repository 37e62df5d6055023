"""The fused LN-GRU step: an onnxruntime custom-op library (``lngru_step.cc``) that the install builds where a
C++ compiler exists (setup.py, an optional extension).

``loader.fused_op_status()`` says whether it can be used here: the library file exists, onnxruntime loads
it, and a self-check on a small random cell agrees with the plain graph. Anything else (no compiler at
install, a load error, a disagreeing self-check) leaves the onnx backend on the plain graph, with the reason
in the log and in the model's description. The custom op only ever appears in graphs built in memory for
serving; exported ONNX files stay standard. This module holds only names (the graph builder imports it
without onnxruntime).
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

DOMAIN = "ai.lnserve"
DOMAIN_VERSION = 1
LN_OP, RMS_OP = "LnGruStep", "RmsGruStep"
FUSED_CELLS = ("lngru", "rlngru")  # plain gru has no norms: nothing to fuse
SELF_CHECK_TOL = 1e-5  # the fidelity contract; the measured gap is ~2e-7


def library_path() -> Path:
    """Where the install puts the library: ``lib/``, not a package, so nothing tries to import it as a
    Python module (it is named like one by setuptools)."""
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    return Path(__file__).with_name("lib") / f"_lngru_step{suffix}"


@dataclass(frozen=True)
class FusedOpStatus:
    """Whether the fused step can be used, and why not."""

    library: Path
    available: bool
    reason: str = ""
