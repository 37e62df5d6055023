"""The lngru / rlngru step with its pointwise part as one custom op (``ai.lnserve`` ``LnGruStep`` /
``RmsGruStep``, see ``lnserve.app.runtime.fused_op``): the recurrent GEMM stays an onnxruntime MatMul (MLAS,
prepacked weights) and everything after it is one node.

The step is one GEMM ``h @ [U_ru | U_c]`` (d, 3d), not the plain graph's two: the op reads the gates' and the
candidate's columns in place, so the joint GEMM costs no Split copy, and a step dispatches one GEMM to the
thread pool instead of two (issue 24: B=32 was at 0.84 of the FLOP ceiling).

Such graphs only run in a session that registered the op library; they are built in memory for serving and
never exported (``lnserve export`` writes standard ONNX).
"""

from __future__ import annotations

import numpy as np

from ..fused_op import DOMAIN, FUSED_CELLS, LN_OP, RMS_OP
from .builder import GraphBuilder
from .gru import GruArrays, GruCell, GruNorms


class FusedGruCell(GruCell):
    """A ``GruCell`` whose step is one MatMul and one fused node."""

    def recurrent_weights(self, g: GraphBuilder, arrays: GruArrays) -> None:
        """[U_ru | U_c] stored once, as the joint matrix."""
        self.u = self.gemms.weight(g, np.concatenate([arrays.u_ru, arrays.u_c], axis=1), "U", state=True)

    def fused_norms(self) -> GruNorms:
        if self.norms is None or self.cell not in FUSED_CELLS:
            raise ValueError(f"the fused step needs a normalised GRU cell ({', '.join(FUSED_CELLS)})")
        return self.norms

    def step(self, g: GraphBuilder, states: list[str], xs: list[str]) -> list[str]:
        (h,), (a_t, c_t) = states, xs
        norms = self.fused_norms()
        inputs = [self.gemms.by_state(g, h, self.u), a_t, c_t, h, norms.hh_ru.gain, norms.hh_c.gain]
        if self.cell == "lngru":
            assert norms.hh_c.bias is not None  # lngru norms always carry a bias (read_norms)
            return [g.op(LN_OP, [*inputs, norms.hh_c.bias], domain=DOMAIN)]
        return [g.op(RMS_OP, inputs, domain=DOMAIN)]
