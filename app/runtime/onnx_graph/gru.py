"""The GRU-family cells (``gru``, ``lngru``, ``rlngru``; spec §4.1-4.3): weights, input side, one step.

Theano layout throughout: ``x @ W`` with W (in, out), the gates [r | u] first and then the candidate. The
input projections and their norms do not depend on the state, so they run once for all T*B tokens before the
recurrence; a step is two recurrent GEMMs (``h @ U``, ``h @ Ux``: no slicing copies), their norms and the
gate maths.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from .builder import GraphBuilder, f32, need, split_equal
from .gemms import Float32Gemms, Gemms
from .norms import Norm, NormArrays, NormedCell, add_norm, read_norms

GRU_NORMS = ("norm_ih_ru", "norm_ih_c", "norm_hh_ru", "norm_hh_c")  # norm1 .. norm4 of spec §4.2


@dataclass(frozen=True)
class GruArrays:
    """One cell's weights in Theano (in, out) layout, split into the [r | u] gates and the candidate."""

    w_ru: np.ndarray  # (n_in, 2d) W, input projection of the gates
    b_ru: np.ndarray  # (2d,) b
    w_c: np.ndarray  # (n_in, d) Wx, input projection of the candidate
    b_c: np.ndarray  # (d,) bx
    u_ru: np.ndarray  # (d, 2d) U
    u_c: np.ndarray  # (d, d) Ux
    norms: dict[str, NormArrays]  # GRU_NORMS -> (gain, bias); empty for plain gru


def read_gru(cell: str, weights: Mapping[str, np.ndarray], n_in: int, d: int) -> GruArrays:
    """Check every weight's shape and transpose the PyTorch (out, in) matrices to Theano layout."""
    w_ih = need(weights, "weight_ih", (3 * d, n_in)).T
    b_ih = need(weights, "bias_ih", (3 * d,))
    w_hh = need(weights, "weight_hh", (3 * d, d)).T
    norms = {}
    if cell != "gru":
        sizes = {name: d if name.endswith("_c") else 2 * d for name in GRU_NORMS}
        norms = read_norms(weights, sizes, with_bias=cell == "lngru")
    return GruArrays(
        w_ru=w_ih[:, : 2 * d],
        b_ru=b_ih[: 2 * d],
        w_c=w_ih[:, 2 * d :],
        b_c=b_ih[2 * d :],
        u_ru=w_hh[:, : 2 * d],
        u_c=w_hh[:, 2 * d :],
        norms=norms,
    )


@dataclass(frozen=True)
class GruNorms:
    """Initializer names of the four norms of ``lngru`` / ``rlngru``."""

    in_ru: Norm  # norm1, with b3 folded into its bias: both are added before the sigmoid
    in_c: Norm  # norm2
    hh_ru: Norm  # norm3, gain only
    hh_c: Norm  # norm4


class GruCell(NormedCell):
    """A GRU-family cell as initializers plus two graph pieces: ``hoisted_inputs`` and ``step``."""

    n_states = 1  # h

    def __init__(
        self, g: GraphBuilder, cell: str, arrays: GruArrays, opset: int, gemms: Gemms | None = None
    ) -> None:
        self.cell, self.opset = cell, opset
        self.gemms = gemms or Float32Gemms()
        self.d = d = int(arrays.u_c.shape[0])
        self.seq_widths = [2 * d, d]  # A and C
        self.w_ru, self.b_ru = self.gemms.weight(g, arrays.w_ru, "W_ru"), g.const(f32(arrays.b_ru), "b_ru")
        self.w_c, self.b_c = self.gemms.weight(g, arrays.w_c, "W_c"), g.const(f32(arrays.b_c), "b_c")
        self.recurrent_weights(g, arrays)
        self.norms: GruNorms | None = None
        if arrays.norms:
            (s1, b1), (s2, b2), (s3, b3), (s4, b4) = (arrays.norms[name] for name in GRU_NORMS)
            b13 = None if b1 is None or b3 is None else b1 + b3
            self.norms = GruNorms(
                in_ru=add_norm(g, "s_ih_ru", s1, "b_ih_ru_plus_hh_ru", b13),
                in_c=add_norm(g, "s_ih_c", s2, "b_ih_c", b2),
                hh_ru=add_norm(g, "s_hh_ru", s3),
                hh_c=add_norm(g, "s_hh_c", s4, "b_hh_c", b4),
            )

    def recurrent_weights(self, g: GraphBuilder, arrays: GruArrays) -> None:
        """U and Ux as two matrices (the fused step stores them as one)."""
        self.u_ru, self.u_c = (
            self.gemms.weight(g, arrays.u_ru, "U_ru", state=True),
            self.gemms.weight(g, arrays.u_c, "U_c", state=True),
        )

    def hoisted_inputs(self, g: GraphBuilder, x: str) -> list[str]:
        """A = norm1(x W + b) + b3 (T, B, 2d) and C = norm2(x Wx + bx) (T, B, d), for all tokens at once."""
        a = g.op("Add", [self.gemms.by_token(g, x, self.w_ru), self.b_ru])
        c = g.op("Add", [self.gemms.by_token(g, x, self.w_c), self.b_c])
        if self.norms is None:
            return [a, c]
        return [self.norm(g, a, self.norms.in_ru), self.norm(g, c, self.norms.in_c)]

    def step(self, g: GraphBuilder, states: list[str], xs: list[str]) -> list[str]:
        """h' from h and this step's rows of A and C."""
        (h,), (a_t, c_t) = states, xs
        pre, cand = self.recurrent_terms(g, h, a_t)
        r, u = split_equal(g, g.op("Sigmoid", [pre]), 2, self.opset)
        hh = g.op("Tanh", [g.op("Add", [g.op("Mul", [r, cand]), c_t])])
        return [self.update(g, h, u, hh)]

    def recurrent_terms(self, g: GraphBuilder, h: str, a_t: str) -> tuple[str, str]:
        """The gates' pre-activation A_t + norm3(h U) and the candidate's recurrent term norm4(h Ux)."""
        hu_c = self.gemms.by_state(g, h, self.u_c)
        if self.norms is None:  # plain gru: A_t rides in as the GEMM's C operand
            return self.gemms.by_state_plus(g, h, self.u_ru, a_t), hu_c
        pre = g.op("Add", [self.norm(g, self.gemms.by_state(g, h, self.u_ru), self.norms.hh_ru), a_t])
        return pre, self.norm(g, hu_c, self.norms.hh_c)

    def update(self, g: GraphBuilder, h: str, u: str, hh: str) -> str:
        """h' = u*h + (1 - u)*hh, written as hh + u*(h - hh): three ops instead of four."""
        return g.op("Add", [hh, g.op("Mul", [u, g.op("Sub", [h, hh])])])


def native_gru(
    g: GraphBuilder, weights: Mapping[str, np.ndarray], x: str, lengths: str, n_in: int, d: int
) -> str:
    """Plain gru as the ONNX GRU op: gates reordered to z, r, h, linear_before_reset=1, Rb = 0 (spec §11)."""
    w_ih = need(weights, "weight_ih", (3 * d, n_in))
    b_ih = need(weights, "bias_ih", (3 * d,))
    w_hh = need(weights, "weight_hh", (3 * d, d))

    def zrh(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a[d : 2 * d], a[:d], a[2 * d :]], axis=0)

    w = g.const(f32(zrh(w_ih))[None], "gru_W")
    r = g.const(f32(zrh(w_hh))[None], "gru_R")
    bias = g.const(f32(np.concatenate([zrh(b_ih), np.zeros(3 * d)]))[None], "gru_B")
    lens = g.op("Cast", [lengths], to=TensorProto.INT32)
    _, y_h = g.op_multi("GRU", [x, w, r, bias, lens], 2, hidden_size=d, linear_before_reset=1)
    return g.op("Squeeze", [y_h, g.cached("c_axes0", np.array([0], np.int64))])
