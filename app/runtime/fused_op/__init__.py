"""The fused LN-GRU step and sequence: an onnxruntime custom-op library (``lngru_step.cc``,
``lngru_sequence.cc``) that the install builds where a C++ compiler exists (setup.py, an optional extension).

Two forms, picked per recurrent part by its state width (``uses_sequence_op``):
- the step op (``LnGruStep`` / ``RmsGruStep``): a Scan whose body is the recurrent GEMM (onnxruntime's
  MLAS) and one node for the rest of the step. For large cells, where the GEMM is the time;
- the sequence op (``LnGruSequence`` / ``RmsGruSequence``): the whole recurrence as one node with its own
  small GEMM. For small cells, where a Scan iteration's own cost (~10 us) was most of the time, fp32 only.

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
LN_SEQUENCE_OP, RMS_SEQUENCE_OP = "LnGruSequence", "RmsGruSequence"
OP_VERSION = 2  # LnserveFusedOpVersion() of a library that holds every op above
# The widest state served by the sequence op (benchmarks/fused_step_op.py, against the step op): at 128,
# 1.35-2.1x from 12 rows up and 0.83-0.89x at one row (0.01-0.02 ms); at 64, 1.4-2.3x at every batch; at 256,
# 1.1-1.4x from 12 rows up but 0.7x at one row (a single-threaded GEMV out of L2); at 512 even; at 1024 0.5x.
SEQUENCE_MAX_D = 128
FUSED_CELLS = ("lngru", "rlngru")  # plain gru has no norms: nothing to fuse
SELF_CHECK_TOL = 1e-5  # the fidelity contract; the measured gap is ~2e-7


def uses_sequence_op(d: int, precision: str, max_dim: int = SEQUENCE_MAX_D) -> bool:
    """Whether a fused part of state width ``d`` runs as the whole-sequence op (fp32 only: its GEMMs are
    float32). ``max_dim``: the widest such state (``LNSERVE_FUSED_SEQUENCE_MAX_DIM``; 0: never)."""
    return precision == "fp32" and d <= max_dim


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
