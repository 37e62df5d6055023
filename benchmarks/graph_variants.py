"""The ONNX graph forms that were measured against the production form and lost, kept for the benchmarks.

``build_variant_graph`` takes the production builder's arguments (``lnserve.app.runtime.onnx_graph``) plus
the alternatives below; with none of them set it builds the production graph. Every variant is exact to
float32 rounding (tests/unit/app/runtime/test_onnx_graph.py checks them against a float64 reference):

  form="unrolled", steps=T: a straight-line graph for a fixed T (one per length bucket), which CUDA graphs can
    capture, unlike Loop/Scan (spec §11). Passing ``steps`` without ``form`` selects it.
  mask="where": the literal spec §2 mask carry, ``Where(t < length, h', h)`` every step, instead of keeping
    every step's state and gathering each row's last one (bit for bit equal; two ops a step more).
  split_gemm=False: one recurrent GEMM ``h @ [U | Ux]`` + Split (a copy per step) instead of two GEMMs.
  update="spec": h' = u*h + (1 - u)*hh (4 ops) instead of hh + u*(h - hh) (3 ops).
  norm="manual": LayerNorm written as ReduceMean/Sub/Pow/Sqrt/Div; norm="meanshift": the projections are
    centred per norm group offline so that LN becomes RMS + beta (spec §11); "auto" / "op": the production
    ``LayerNormalization`` op.
  gates="ln-bias" (lngru only): the gates' pre-activation A_t rides in as the bias input of norm3's
    ``LayerNormalization`` (ONNX broadcasts it like ``Add``; norm3's own bias is folded into norm1's), one
    node a step fewer than "add", the production LN + Add (issue 13: fewer normalisation nodes a step).

``VARIANTS`` names the kwargs sets that ``benchmarks/encode_throughput.py --graphs`` times against production.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import onnx
from onnx import TensorProto, helper

from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph
from lnserve.app.runtime.onnx_graph.builder import GraphBuilder, value_info
from lnserve.app.runtime.onnx_graph.gru import GruArrays, GruCell, read_gru
from lnserve.app.runtime.onnx_graph.lstm import LstmArrays, LstmCell, read_lstm
from lnserve.app.runtime.onnx_graph.norms import Norm, cell_norm, rms_norm
from lnserve.app.runtime.onnx_graph.recurrent import (
    LENGTHS,
    RecurrentCell,
    X,
    encoder_dims,
    encoder_model,
    gather_last_valid,
    loop_every_state,
    scan_every_state,
    state_infos,
    time_steps,
    zero_state,
)
from lnserve.models.cell_types import CELL_TYPES, LSTM_CELLS
from lnserve.models.cell_types import NORM_EPS as EPS

VARIANT_FORMS: tuple[str, ...] = ("loop", "scan", "unrolled", "native")
NORM_IMPLS: tuple[str, ...] = ("auto", "op", "manual", "meanshift")
GATE_FORMS: tuple[str, ...] = ("add", "ln-bias")

# name -> build_variant_graph kwargs, for ``encode_throughput.py --graphs`` ("production": no kwargs)
VARIANTS: dict[str, dict[str, object]] = {
    "production": {},
    "loop": {"form": "loop"},
    "mask-where": {"mask": "where"},
    "1gemm+split": {"split_gemm": False},
    "spec-update": {"update": "spec"},
    "manual-ln": {"norm": "manual"},
    "meanshift": {"norm": "meanshift"},
    "gates-ln-bias": {"gates": "ln-bias"},
}


def build_variant_graph(
    cell: str,
    weights: Mapping[str, np.ndarray],
    *,
    opset: int = 18,
    form: str = "scan",
    steps: int | None = None,
    norm: str = "auto",
    split_gemm: bool = True,
    update: str = "lerp",
    mask: str = "gather",
    gates: str = "add",
) -> onnx.ModelProto:
    """The encoder graph of ``build_recurrent_encoder_graph`` in one of the measured alternative forms."""
    form, norm = _check(cell, opset, form, steps, norm, mask)
    if gates not in GATE_FORMS or (
        gates == "ln-bias" and (cell != "lngru" or norm != "op" or not split_gemm)
    ):
        raise ValueError(
            f"gates={gates!r}: expected one of {GATE_FORMS}; 'ln-bias' needs lngru, norm='op', split_gemm"
        )
    if form == "native":
        return build_recurrent_encoder_graph(cell, weights, opset=opset, form=form)
    n_in, d = encoder_dims(weights)
    g = GraphBuilder()
    rnn = variant_cell(
        g, cell, weights, n_in, d, opset, norm=norm, split_gemm=split_gemm, update=update, gates=gates
    )
    seqs = rnn.hoisted_inputs(g, X)
    if form == "unrolled":
        assert steps is not None
        h = unrolled(g, rnn, seqs, steps, opset, masked=mask == "where")
        h = h if mask == "where" else gather_last_valid(g, h, d)
        return encoder_model(g, cell, h, t_dim=steps, n_in=n_in, d=d, opset=opset)
    if mask == "where":
        h = (masked_scan if form == "scan" else masked_loop)(g, rnn, seqs)
    else:
        h = gather_last_valid(g, (scan_every_state if form == "scan" else loop_every_state)(g, rnn, seqs), d)
    return encoder_model(g, cell, h, t_dim="T", n_in=n_in, d=d, opset=opset)


def _check(cell: str, opset: int, form: str, steps: int | None, norm: str, mask: str) -> tuple[str, str]:
    """Validate the options; returns the resolved (form, norm)."""
    if cell not in CELL_TYPES:
        raise ValueError(f"unknown cell {cell!r}; expected one of {CELL_TYPES}")
    if steps is not None and form == "scan":
        form = "unrolled"
    if form not in VARIANT_FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {VARIANT_FORMS}")
    if form == "unrolled" and (steps is None or steps < 1):
        raise ValueError("form='unrolled' needs steps >= 1")
    if form == "native" and cell != "gru":
        raise ValueError("the native ONNX GRU op has no hook for norms: only cell='gru' can use it")
    if mask not in ("where", "gather"):
        raise ValueError(f"unknown mask {mask!r}; expected 'where' or 'gather'")
    if norm not in NORM_IMPLS:
        raise ValueError(f"unknown norm {norm!r}; expected one of {NORM_IMPLS}")
    if norm == "auto":
        norm = "op" if opset >= 17 else "manual"
    if norm == "op" and opset < 17:
        raise ValueError("norm='op' needs opset >= 17 (LayerNormalization)")
    return form, norm


# --------------------------------------------------------------------------------------------------- cells


def variant_cell(
    g: GraphBuilder,
    cell: str,
    weights: Mapping[str, np.ndarray],
    n_in: int,
    d: int,
    opset: int,
    *,
    norm: str,
    split_gemm: bool,
    update: str,
    gates: str = "add",
) -> RecurrentCell:
    """The production cell with the chosen norm implementation, recurrent GEMM split and update form."""
    meanshift = norm == "meanshift" and cell.startswith("ln")  # only LN has a mean to shift
    if cell in LSTM_CELLS:
        lstm = read_lstm(cell, weights, n_in, d)
        return VariantLstm(g, cell, centred_lstm(lstm) if meanshift else lstm, opset, norm=norm)
    gru = read_gru(cell, weights, n_in, d)
    gru = centred_gru(gru) if meanshift else gru
    return VariantGru(g, cell, gru, opset, norm=norm, split_gemm=split_gemm, update=update, gates=gates)


def _centre(w_t: np.ndarray, bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Centre a (in, n) projection and its bias over the n outputs of one norm group (spec §11 mean-shift).

    After centring, every row's projection has zero group mean, so LN(z; beta, gamma) == RMS(z; gamma) + beta
    exactly in real arithmetic.
    """
    w64 = w_t.astype(np.float64)  # centre in float64, round once when the initializer is written
    w_c = w64 - w64.mean(axis=1, keepdims=True)
    b_c = None if bias is None else bias.astype(np.float64) - bias.astype(np.float64).mean()
    return w_c, b_c


def centred_gru(a: GruArrays) -> GruArrays:
    (w_ru, b_ru), (w_c, b_c) = _centre(a.w_ru, a.b_ru), _centre(a.w_c, a.b_c)
    assert b_ru is not None and b_c is not None
    return replace(a, w_ru=w_ru, b_ru=b_ru, w_c=w_c, b_c=b_c, u_ru=_centre(a.u_ru)[0], u_c=_centre(a.u_c)[0])


def centred_lstm(a: LstmArrays) -> LstmArrays:
    """Centre W, U and the pre-norm copy of b; the post-norm b (folded into the norm bias) stays as it is."""
    w, b_in = _centre(a.w, a.b_in)
    assert b_in is not None
    return replace(a, w=w, b_in=b_in, u=_centre(a.u)[0])


def manual_layer_norm(g: GraphBuilder, z: str, norm: Norm) -> str:
    """LN(z; bias, gain) as ReduceMean/Sub/Pow/Sqrt/Div (population variance, eps inside the sqrt)."""
    two = g.cached("c_two", np.array(2.0, np.float32))
    eps = g.cached("c_eps", np.array(EPS, np.float32))
    axes = g.cached("c_axes_last", np.array([-1], np.int64))
    mu = g.op("ReduceMean", [z, axes], keepdims=1)
    dz = g.op("Sub", [z, mu])
    var = g.op("ReduceMean", [g.op("Pow", [dz, two]), axes], keepdims=1)
    y = g.op("Mul", [g.op("Div", [dz, g.op("Sqrt", [g.op("Add", [var, eps])])]), norm.gain])
    return y if norm.bias is None else g.op("Add", [y, norm.bias])


def variant_norm(
    g: GraphBuilder, z: str, norm: Norm, *, cell: str, opset: int, impl: str, centred: bool
) -> str:
    """``impl`` for the LN cells; ``centred`` says z is a projection that ``meanshift`` centred offline."""
    if impl == "op" or cell.startswith("rln"):
        return cell_norm(g, z, norm, cell=cell, opset=opset)
    if impl == "meanshift" and centred:
        y = rms_norm(g, z, norm.gain, opset)
        return y if norm.bias is None else g.op("Add", [y, norm.bias])
    return manual_layer_norm(g, z, norm)


class VariantGru(GruCell):
    def __init__(
        self,
        g: GraphBuilder,
        cell: str,
        arrays: GruArrays,
        opset: int,
        *,
        norm: str,
        split_gemm: bool,
        update: str,
        gates: str = "add",
    ) -> None:
        super().__init__(g, cell, arrays, opset)
        self.norm_impl, self.split_gemm, self.update_form, self.gates = norm, split_gemm, update, gates
        if not split_gemm:  # one (d, 3d) recurrent weight replaces the production pair
            del g.inits[self.u_ru], g.inits[self.u_c]
            self.u_all = g.const(
                np.concatenate([arrays.u_ru, arrays.u_c], axis=1).astype(np.float32), "U_all"
            )

    def norm(self, g: GraphBuilder, z: str, norm: Norm) -> str:
        return variant_norm(g, z, norm, cell=self.cell, opset=self.opset, impl=self.norm_impl, centred=True)

    def recurrent_terms(self, g: GraphBuilder, h: str, a_t: str) -> tuple[str, str]:
        if self.gates == "ln-bias" and self.norms is not None:
            hh_ru = self.norms.hh_ru  # gain only: its bias is folded into norm1's
            z = g.op("MatMul", [h, self.u_ru])
            pre = g.op("LayerNormalization", [z, hh_ru.gain, a_t], axis=-1, epsilon=EPS)
            return pre, self.norm(g, g.op("MatMul", [h, self.u_c]), self.norms.hh_c)
        if self.split_gemm:
            return super().recurrent_terms(g, h, a_t)
        split = g.cached("c_split_2d_d", np.array([2 * self.d, self.d], np.int64))
        pre, cand = g.op_multi("Split", [g.op("MatMul", [h, self.u_all]), split], 2, axis=-1)
        if self.norms is None:
            return g.op("Add", [pre, a_t]), cand
        pre = g.op("Add", [self.norm(g, pre, self.norms.hh_ru), a_t])
        return pre, self.norm(g, cand, self.norms.hh_c)

    def update(self, g: GraphBuilder, h: str, u: str, hh: str) -> str:
        if self.update_form == "lerp":
            return super().update(g, h, u, hh)
        one = g.cached("c_one", np.array(1.0, np.float32))  # the literal spec form
        return g.op("Add", [g.op("Mul", [u, h]), g.op("Mul", [g.op("Sub", [one, u]), hh])])


class VariantLstm(LstmCell):
    def __init__(self, g: GraphBuilder, cell: str, arrays: LstmArrays, opset: int, *, norm: str) -> None:
        super().__init__(g, cell, arrays, opset)
        self.norm_impl = norm

    def norm(self, g: GraphBuilder, z: str, norm: Norm) -> str:
        centred = self.norms is None or norm is not self.norms.cell  # the cell state c is never centred
        return variant_norm(
            g, z, norm, cell=self.cell, opset=self.opset, impl=self.norm_impl, centred=centred
        )


# --------------------------------------------------------------------------------------------------- forms


def masked_step(rnn: RecurrentCell, g: GraphBuilder, states: list[str], xs: list[str], m_t: str) -> list[str]:
    """One step with the spec §2 mask carry: rows at or past their length keep every state unchanged."""
    new = rnn.step(g, states, xs)
    return [g.op("Where", [m_t, n, s]) for n, s in zip(new, states, strict=True)]


def lengths_column(g: GraphBuilder) -> str:
    return g.op("Unsqueeze", [LENGTHS, g.const(np.array([1], np.int64), "c_axes1")])  # (B, 1)


def unrolled(
    g: GraphBuilder, rnn: RecurrentCell, seqs: list[str], steps: int, opset: int, *, masked: bool
) -> str:
    """Straight-line graph for T = ``steps``: the final state if ``masked``, else every step's h (T, B, d).

    One Split per hoisted sequence (a single pass over it) instead of a Gather copy per step; Squeeze aliases
    its input in ORT, so the per-step slices cost no further copies.
    """
    axes0 = g.cached("c_axes0", np.array([0], np.int64))
    states = [zero_state(g, rnn.d)] * rnn.n_states
    pieces = [
        g.op_multi("Split", [s], steps, axis=0, num_outputs=steps)
        if opset >= 18
        else g.op_multi("Split", [s, g.cached("c_ones_t", np.ones(steps, np.int64))], steps, axis=0)
        for s in seqs
    ]
    lens_col = lengths_column(g) if masked else ""
    hs = []
    for t in range(steps):
        xs = [g.op("Squeeze", [ps[t], axes0]) for ps in pieces]
        if masked:
            m_t = g.op("Less", [g.const(np.array(t, np.int64), f"c_t{t}"), lens_col])
            states = masked_step(rnn, g, states, xs, m_t)
        else:
            states = rnn.step(g, states, xs)
        hs.append(states[0])
    return states[0] if masked else g.op("Concat", [g.op("Unsqueeze", [h, axes0]) for h in hs], axis=0)


def masked_scan(g: GraphBuilder, rnn: RecurrentCell, seqs: list[str]) -> str:
    """ONNX Scan with the per-step mask as one more scan input (T, B, 1); returns the final state."""
    body = g.sub("scan_")
    st_in = [f"scan_state_in{k}" for k in range(rnn.n_states)]
    x_in = [f"scan_x_in{k}" for k in range(len(seqs))]
    m_in = "scan_m_in"
    st_out = masked_step(rnn, body, st_in, x_in, m_in)
    body_graph = helper.make_graph(
        body.nodes,
        "scan_body",
        [
            *state_infos(st_in, rnn.d),
            *[value_info(n, TensorProto.FLOAT, ["B", w]) for n, w in zip(x_in, rnn.seq_widths, strict=True)],
            value_info(m_in, TensorProto.BOOL, ["B", 1]),
        ],
        state_infos(st_out, rnn.d),
    )
    zero = g.const(np.array(0, np.int64), "c_zero_i64")
    t_range = g.op("Range", [zero, time_steps(g), g.cached("c_one_i64", np.array(1, np.int64))])
    t_range = g.op("Unsqueeze", [t_range, g.const(np.array([1, 2], np.int64), "c_axes12")])  # (T, 1, 1)
    lens_row = g.op("Unsqueeze", [lengths_column(g), g.cached("c_axes0", np.array([0], np.int64))])
    mask_t = g.op("Less", [t_range, lens_row])  # (T, B, 1)
    h0 = zero_state(g, rnn.d)
    outs = g.op_multi(
        "Scan",
        [*[h0] * rnn.n_states, *seqs, mask_t],
        rnn.n_states,
        body=body_graph,
        num_scan_inputs=len(seqs) + 1,
    )
    return outs[0]


def masked_loop(g: GraphBuilder, rnn: RecurrentCell, seqs: list[str]) -> str:
    """ONNX Loop computing the mask from the iteration counter every step; returns the final state."""
    lens_col = lengths_column(g)
    body = g.sub("loop_")
    it, cond_in = "loop_iter", "loop_cond_in"
    st_in = [f"loop_state_in{k}" for k in range(rnn.n_states)]
    xs = [body.op("Gather", [s, it], axis=0) for s in seqs]
    st_out = masked_step(rnn, body, st_in, xs, body.op("Less", [it, lens_col]))
    cond_out = body.op("Identity", [cond_in])
    counters = [value_info(it, TensorProto.INT64, []), value_info(cond_in, TensorProto.BOOL, [])]
    body_graph = helper.make_graph(
        body.nodes,
        "loop_body",
        [*counters, *state_infos(st_in, rnn.d)],
        [value_info(cond_out, TensorProto.BOOL, []), *state_infos(st_out, rnn.d)],
    )
    h0 = zero_state(g, rnn.d)
    outs = g.op_multi("Loop", [time_steps(g), "", *[h0] * rnn.n_states], rnn.n_states, body=body_graph)
    return outs[0]
