"""The LSTM-family cells (``lstm``, ``lnlstm``, ``rlnlstm``; spec §4.4-4.6): weights, input side, one step.

Theano gate order i, f, o, g is kept. The legacy code adds the bias ``b`` twice: to the input projection and
again after the norms; the second copy (with the norm biases) folds into the hoisted input norm's bias.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .builder import GraphBuilder, f32, need
from .gemms import Float32Gemms, Gemms
from .norms import Norm, NormArrays, NormedCell, add_norm, read_norms

LSTM_NORMS = ("norm_ih", "norm_hh", "norm_cell")  # norm1 .. norm3 of spec §4.5


@dataclass(frozen=True)
class LstmArrays:
    """One cell's weights in Theano (in, out) layout."""

    w: np.ndarray  # (n_in, 4d) W
    b_in: np.ndarray  # (4d,) b as added to the input projection (before its norm)
    u: np.ndarray  # (d, 4d) U
    b: np.ndarray  # (4d,) b as added after the norms
    norms: dict[str, NormArrays]  # LSTM_NORMS -> (gain, bias); empty for plain lstm


def read_lstm(cell: str, weights: Mapping[str, np.ndarray], n_in: int, d: int) -> LstmArrays:
    """Check every weight's shape and transpose the PyTorch (out, in) matrices to Theano layout."""
    w = need(weights, "weight_ih", (4 * d, n_in)).T
    u = need(weights, "weight_hh", (4 * d, d)).T
    b = need(weights, "bias", (4 * d,))
    norms = {}
    if cell != "lstm":
        sizes = {name: d if name == "norm_cell" else 4 * d for name in LSTM_NORMS}
        norms = read_norms(weights, sizes, with_bias=cell == "lnlstm")
    return LstmArrays(w=w, b_in=b, u=u, b=b, norms=norms)


@dataclass(frozen=True)
class LstmNorms:
    """Initializer names of the three norms of ``lnlstm`` / ``rlnlstm``."""

    inputs: Norm  # norm1, with b1 + b2 + b folded into its bias
    hidden: Norm  # norm2, gain only
    cell: Norm  # norm3, on the cell state


class LstmCell(NormedCell):
    """An LSTM-family cell as initializers plus two graph pieces: ``hoisted_inputs`` and ``step``."""

    n_states = 2  # h, c (the carried c is the one before norm3)

    def __init__(
        self, g: GraphBuilder, cell: str, arrays: LstmArrays, opset: int, gemms: Gemms | None = None
    ) -> None:
        self.cell, self.opset = cell, opset
        self.gemms = gemms or Float32Gemms()
        self.d = d = int(arrays.u.shape[0])
        self.seq_widths = [4 * d]  # P
        self.w = self.gemms.weight(g, arrays.w, "W")
        self.b_in = g.const(f32(arrays.b_in), "b")
        self.u = self.gemms.weight(g, arrays.u, "U", state=True)
        self.b_post: str | None = None
        self.norms: LstmNorms | None = None
        if not arrays.norms:
            self.b_post = g.const(f32(arrays.b), "b_post")
            return
        (s1, b1), (s2, b2), (s3, b3) = (arrays.norms[name] for name in LSTM_NORMS)
        b_folded = arrays.b if b1 is None or b2 is None else b1 + b2 + arrays.b
        self.norms = LstmNorms(
            inputs=add_norm(g, "s_ih", s1, "b_ih_plus_hh_plus_b", b_folded),
            hidden=add_norm(g, "s_hh", s2),
            cell=add_norm(g, "s_cell", s3, "b_cell", b3),
        )

    def hoisted_inputs(self, g: GraphBuilder, x: str) -> list[str]:
        """P = x W + b, then + b again (lstm) or norm1 with b1 + b2 + b as its bias: (T, B, 4d)."""
        p = g.op("Add", [self.gemms.by_token(g, x, self.w), self.b_in])
        if self.norms is None:
            assert self.b_post is not None
            return [g.op("Add", [p, self.b_post])]
        return [self.norm(g, p, self.norms.inputs)]

    def step(self, g: GraphBuilder, states: list[str], xs: list[str]) -> list[str]:
        """(h', c') from (h, c) and this step's rows of P."""
        (h, c), (p_t,) = states, xs
        d = self.d
        rec = self.gemms.by_state(g, h, self.u)
        if self.norms is not None:
            rec = self.norm(g, rec, self.norms.hidden)
        split = g.cached("c_split_3d_d", np.array([3 * d, d], np.int64))
        q_ifo, q_g = g.op_multi("Split", [g.op("Add", [rec, p_t]), split], 2, axis=-1)
        split3 = g.cached("c_split_d3", np.array([d, d, d], np.int64))
        i, f, o = g.op_multi("Split", [g.op("Sigmoid", [q_ifo]), split3], 3, axis=-1)
        c_new = g.op("Add", [g.op("Mul", [f, c]), g.op("Mul", [i, g.op("Tanh", [q_g])])])
        c_out = c_new if self.norms is None else self.norm(g, c_new, self.norms.cell)
        return [g.op("Mul", [o, g.op("Tanh", [c_out])]), c_new]
