"""The lngru / rlngru step with its pointwise part as one custom op (``ai.lnserve`` ``LnGruStep`` /
``RmsGruStep``, see ``lnserve.app.runtime.fused_op``): the two recurrent GEMMs stay onnxruntime MatMuls
(MLAS, prepacked weights) and everything after them is one node.

Such graphs only run in a session that registered the op library; they are built in memory for serving and
never exported (``lnserve export`` writes standard ONNX).
"""

from __future__ import annotations

from lnserve.app.runtime.fused_op import DOMAIN, FUSED_CELLS, LN_OP, RMS_OP
from lnserve.app.runtime.onnx_graph.builder import GraphBuilder
from lnserve.app.runtime.onnx_graph.gru import GruCell


class FusedGruCell(GruCell):
    """A ``GruCell`` whose step is MatMul, MatMul and one fused node."""

    def step(self, g: GraphBuilder, states: list[str], xs: list[str]) -> list[str]:
        (h,), (a_t, c_t) = states, xs
        norms = self.norms
        if norms is None or self.cell not in FUSED_CELLS:
            raise ValueError(f"the fused step needs a normalised GRU cell ({', '.join(FUSED_CELLS)})")
        hu_ru, hu_c = g.op("MatMul", [h, self.u_ru]), g.op("MatMul", [h, self.u_c])
        inputs = [hu_ru, hu_c, a_t, c_t, h, norms.hh_ru.gain, norms.hh_c.gain]
        if self.cell == "lngru":
            assert norms.hh_c.bias is not None  # lngru norms always carry a bias (read_norms)
            return [g.op(LN_OP, [*inputs, norms.hh_c.bias], domain=DOMAIN)]
        return [g.op(RMS_OP, inputs, domain=DOMAIN)]
