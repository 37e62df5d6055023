"""The lngru / rlngru step with its pointwise part as one custom op (``ai.lnserve`` ``LnGruStep`` /
``RmsGruStep``, see ``lnserve.app.runtime.fused_op``): the recurrent GEMM stays an onnxruntime MatMul (MLAS,
prepacked weights) and everything after it is one node.

The step is one GEMM ``h @ [U_ru | U_c]`` (d, 3d), not the plain graph's two: the op reads the gates' and the
candidate's columns in place, so the joint GEMM costs no Split copy, and a step dispatches one GEMM to the
thread pool instead of two (issue 24: B=32 was at 0.84 of the FLOP ceiling).

``gru_sequence``: the whole recurrence, input side included, as one ``LnGruSequence`` / ``RmsGruSequence``
node, for small cells (``fused_op.uses_sequence_op``): no Scan at all.

Such graphs only run in a session that registered the op library; they are built in memory for serving and
never exported (``lnserve export`` writes standard ONNX).
"""

from __future__ import annotations

import numpy as np

from ..fused_op import DOMAIN, FUSED_CELLS, LN_OP, LN_SEQUENCE_OP, RMS_OP, RMS_SEQUENCE_OP
from .builder import GraphBuilder, f32
from .gru import GRU_NORMS, GruArrays, GruCell, GruNorms


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


def gru_sequence(g: GraphBuilder, cell: str, arrays: GruArrays, x: str, lengths: str) -> str:
    """The whole lngru / rlngru recurrence as one node: h (B, d) after each row's last valid step.

    The node also does the input side (``GruCell.hoisted_inputs``) step by step: for a small cell those six
    nodes over all T*B tokens cost more than the recurrence itself, and padding steps are skipped."""
    if cell not in FUSED_CELLS:
        raise ValueError(f"the sequence op needs a normalised GRU cell ({', '.join(FUSED_CELLS)})")
    (s1, b1), (s2, b2), (s3, b3), (s4, b4) = (arrays.norms[name] for name in GRU_NORMS)
    inputs = [
        x,
        lengths,
        g.const(f32(np.concatenate([arrays.w_ru, arrays.w_c], axis=1)), "W"),
        g.const(f32(np.concatenate([arrays.b_ru, arrays.b_c])), "b"),
        g.const(f32(s1), "s_ih_ru"),
        g.const(f32(s2), "s_ih_c"),
        g.const(f32(np.concatenate([arrays.u_ru, arrays.u_c], axis=1)), "U"),
        g.const(f32(s3), "s_hh_ru"),
        g.const(f32(s4), "s_hh_c"),
    ]
    if cell == "rlngru":
        return g.op(RMS_SEQUENCE_OP, inputs, domain=DOMAIN)
    assert b1 is not None and b2 is not None and b3 is not None and b4 is not None  # lngru: read_norms
    biases = [g.const(f32(b1 + b3), "b_ih_ru_plus_hh_ru"), g.const(f32(b2), "b_ih_c")]
    biases.append(g.const(f32(b4), "b_hh_c"))
    return g.op(LN_SEQUENCE_OP, [*inputs, *biases], domain=DOMAIN)
