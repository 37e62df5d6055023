"""Build ONNX graphs for the legacy Theano recurrent sentence encoders (spec §2-§4, §11).

The graphs are written op by op with ``onnx.helper`` instead of being traced from PyTorch, because tracing
unrolls the time loop at the example length (spec §11) and we want explicit control over the graph form:

* the input projection and the input-side norms are hoisted out of the recurrence into one GEMM over all T*B
  tokens; only the recurrent GEMM ``h @ [U | Ux]`` and the pointwise gate maths step;
* every weight is an initializer of the main graph, stored once and shared by every step (the Loop/Scan bodies
  read it from the outer scope, the unrolled form references the same name from each step);
* the output is each row's state after its last valid step: by default every step's state is kept (a Scan
  output) and the one at step length-1 is gathered once at the end (spec §11); that is bit-identical to the
  exact ``Where(t < length, h', h)`` mask carry of spec §2 (``mask="where"``) and saves two ops a step.

The graph form (``Loop`` / ``Scan`` / unrolled fixed-T) and the norm implementation are keyword options; the
defaults are the fastest forms measured on the development CPU (see ``benchmarks/onnx_graph_forms.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lnserve.models.cell_types import CELL_TYPES
from lnserve.models.cell_types import NORM_EPS as EPS

__all__ = [
    "CELL_TYPES",
    "GRAPH_FORMS",
    "NORM_IMPLS",
    "build_image_encoder_graph",
    "build_recurrent_encoder_graph",
]

GRAPH_FORMS: tuple[str, ...] = ("loop", "scan", "unrolled", "native")
NORM_IMPLS: tuple[str, ...] = ("auto", "op", "manual", "meanshift")

_GRU_NORMS = ("norm_ih_ru", "norm_ih_c", "norm_hh_ru", "norm_hh_c")
_LSTM_NORMS = ("norm_ih", "norm_hh", "norm_cell")


@dataclass
class _Graph:
    """Node list of one (sub)graph plus the initializer table shared with the main graph.

    Subgraph bodies put their constants into the main graph's initializers so that they exist once and are
    visible to the body through the outer scope.
    """

    prefix: str
    inits: dict[str, onnx.TensorProto]
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    counter: list[int] = field(default_factory=lambda: [0])

    def fresh(self, base: str) -> str:
        """Return a graph-unique value name (the counter is shared between the main graph and its bodies)."""
        self.counter[0] += 1
        return f"{self.prefix}{base}_{self.counter[0]}"

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str:
        """Append one node with a single output and return that output's name."""
        outs = self.op_multi(op_type, inputs, n_out, **attrs)
        return outs[0]

    def op_multi(self, op_type: str, inputs: list[str], n_out: int, **attrs: object) -> list[str]:
        """Append one node and return all its output names."""
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        name = self.fresh("node_" + op_type)
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs

    def const(self, value: np.ndarray, base: str) -> str:
        """Register an initializer once in the main graph and return its name."""
        name = base if base not in self.inits else self.fresh(base)
        self.inits[name] = numpy_helper.from_array(np.array(value, order="C"), name)
        return name

    def cached(self, name: str, value: np.ndarray) -> str:
        """Register a small shared constant under a fixed name the first time it is asked for."""
        if name not in self.inits:
            self.inits[name] = numpy_helper.from_array(np.array(value, order="C"), name)
        return name

    def sub(self, prefix: str) -> _Graph:
        """A body graph sharing this graph's initializer table and name counter."""
        return _Graph(prefix=prefix, inits=self.inits, counter=self.counter)


@dataclass(frozen=True)
class _Opts:
    """Resolved build options."""

    cell: str
    d: int
    opset: int
    norm: str
    split_gemm: bool
    update: str


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def _need(weights: Mapping[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Fetch one weight and fail loudly on a missing key or a wrong shape (spec §10 item 12)."""
    if name not in weights:
        raise KeyError(f"missing weight {name!r}")
    arr = np.asarray(weights[name])
    if arr.shape != shape:
        raise ValueError(f"weight {name!r} has shape {arr.shape}, expected {shape}")
    return arr.astype(np.float32, copy=False)


def _centre(w_t: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Centre a (in, n) projection and its bias over the n outputs of one norm group (spec §11 mean-shift).

    After centring, every row's projection has zero group mean, so LN(z; beta, gamma) == RMS(z; gamma) + beta
    exactly in real arithmetic.
    """
    w64 = w_t.astype(np.float64)  # centre in float64, round once when the initializer is written
    w_c = w64 - w64.mean(axis=1, keepdims=True)
    b_c = None if bias is None else bias.astype(np.float64) - bias.astype(np.float64).mean()
    return w_c, b_c


# --------------------------------------------------------------------------------------------------- norms


def _rms(g: _Graph, z: str, gain: str, opts: _Opts) -> str:
    """RMS(z; gain) over the last axis: the standard op from opset 23, else the pattern ORT fuses."""
    if opts.opset >= 23:
        return g.op("RMSNormalization", [z, gain], axis=-1, epsilon=EPS)
    two = g.cached("c_two", np.array(2.0, np.float32))
    eps = g.cached("c_eps", np.array(EPS, np.float32))
    axes = g.cached("c_axes_last", np.array([-1], np.int64))
    ms = g.op("ReduceMean", [g.op("Pow", [z, two]), axes], keepdims=1)
    y = g.op("Div", [z, g.op("Sqrt", [g.op("Add", [ms, eps])])])
    return g.op("Mul", [y, gain])


def _layer_norm(g: _Graph, z: str, gain: str, bias: str | None, opts: _Opts) -> str:
    """LN(z; bias, gain) over the last axis, population variance, eps inside the sqrt (spec §3)."""
    if opts.norm == "op" and opts.opset >= 17:
        inputs = [z, gain] if bias is None else [z, gain, bias]
        return g.op("LayerNormalization", inputs, axis=-1, epsilon=EPS)
    two = g.cached("c_two", np.array(2.0, np.float32))
    eps = g.cached("c_eps", np.array(EPS, np.float32))
    axes = g.cached("c_axes_last", np.array([-1], np.int64))
    mu = g.op("ReduceMean", [z, axes], keepdims=1)
    dz = g.op("Sub", [z, mu])
    var = g.op("ReduceMean", [g.op("Pow", [dz, two]), axes], keepdims=1)
    y = g.op("Mul", [g.op("Div", [dz, g.op("Sqrt", [g.op("Add", [var, eps])])]), gain])
    return y if bias is None else g.op("Add", [y, bias])


# --------------------------------------------------------------------------------------------------- weights


@dataclass
class _GruParams:
    """Initializer names used by the GRU-family step and input side."""

    w_ru: str
    b_ru: str
    w_c: str
    b_c: str
    u_all: str | None
    u_ru: str | None
    u_c: str | None
    in_ru: tuple[str, str | None] | None  # (gain, bias) of the input [r|u] norm, b3 folded into the bias
    in_c: tuple[str, str | None] | None
    hh_ru: str | None  # gain of the recurrent [r|u] norm (its bias lives in in_ru)
    hh_c: tuple[str, str | None] | None


def _gru_params(
    g: _Graph, cell: str, weights: Mapping[str, np.ndarray], n_in: int, opts: _Opts
) -> _GruParams:
    """Transpose to Theano (in, out) layout, fold biases and optionally mean-shift-centre the projections."""
    d = opts.d
    w_ih = _need(weights, "weight_ih", (3 * d, n_in)).T
    b_ih = _need(weights, "bias_ih", (3 * d,))
    w_hh = _need(weights, "weight_hh", (3 * d, d)).T
    w_ru, w_c, b_ru, b_c = w_ih[:, : 2 * d], w_ih[:, 2 * d :], b_ih[: 2 * d], b_ih[2 * d :]
    u_ru, u_c = w_hh[:, : 2 * d], w_hh[:, 2 * d :]
    in_ru = in_c = hh_c = None
    hh_ru = None
    if cell in ("lngru", "rlngru"):
        has_bias = cell == "lngru"
        norms = {}
        for name in _GRU_NORMS:
            size = d if name.endswith("_c") else 2 * d
            gain = _need(weights, f"{name}.weight", (size,))
            beta = _need(weights, f"{name}.bias", (size,)) if has_bias else np.zeros(size)
            norms[name] = (gain, beta)
        if has_bias and opts.norm == "meanshift":
            w_ru, b_ru = _centre(w_ru, b_ru)
            w_c, b_c = _centre(w_c, b_c)
            u_ru, _ = _centre(u_ru, None)
            u_c, _ = _centre(u_c, None)
        # b3 is added before the sigmoid like b1, so it folds into the (hoisted) input norm's bias.
        g_ru, beta_ru = norms["norm_ih_ru"][0], norms["norm_ih_ru"][1] + norms["norm_hh_ru"][1]
        in_ru = (
            g.const(_f32(g_ru), "s_ih_ru"),
            g.const(_f32(beta_ru), "b_ih_ru_plus_hh_ru") if has_bias else None,
        )
        in_c = (
            g.const(_f32(norms["norm_ih_c"][0]), "s_ih_c"),
            g.const(_f32(norms["norm_ih_c"][1]), "b_ih_c") if has_bias else None,
        )
        hh_ru = g.const(_f32(norms["norm_hh_ru"][0]), "s_hh_ru")
        hh_c = (
            g.const(_f32(norms["norm_hh_c"][0]), "s_hh_c"),
            g.const(_f32(norms["norm_hh_c"][1]), "b_hh_c") if has_bias else None,
        )
    u_all = u_ru_n = u_c_n = None
    if opts.split_gemm:
        u_ru_n, u_c_n = g.const(_f32(u_ru), "U_ru"), g.const(_f32(u_c), "U_c")
    else:
        u_all = g.const(_f32(np.concatenate([u_ru, u_c], axis=1)), "U_all")
    return _GruParams(
        w_ru=g.const(_f32(w_ru), "W_ru"),
        b_ru=g.const(_f32(b_ru), "b_ru"),
        w_c=g.const(_f32(w_c), "W_c"),
        b_c=g.const(_f32(b_c), "b_c"),
        u_all=u_all,
        u_ru=u_ru_n,
        u_c=u_c_n,
        in_ru=in_ru,
        in_c=in_c,
        hh_ru=hh_ru,
        hh_c=hh_c,
    )


def _norm_any(g: _Graph, z: str, gain: str, bias: str | None, opts: _Opts, *, centred: bool = True) -> str:
    """Dispatch one norm (+ bias): LN for ln* cells, RMS for rln* cells.

    ``centred`` says the input is a projection that was mean-shift-centred offline, so under norm="meanshift"
    LN is computed as RMS + beta; the LSTM cell norm acts on c, which is never centred.
    """
    if opts.cell.startswith("rln"):
        y = _rms(g, z, gain, opts)
        return y if bias is None else g.op("Add", [y, bias])
    if opts.norm == "meanshift" and centred:
        y = _rms(g, z, gain, opts)
        return y if bias is None else g.op("Add", [y, bias])
    return _layer_norm(g, z, gain, bias, opts)


def _gru_inputs(g: _Graph, x: str, p: _GruParams, opts: _Opts) -> tuple[str, str]:
    """Hoisted input side for all T*B tokens: A = norm1(xW+b)+b3 (T,B,2d), C = norm2(xWx+bx) (T,B,d)."""
    a = g.op("Add", [g.op("MatMul", [x, p.w_ru]), p.b_ru])
    c = g.op("Add", [g.op("MatMul", [x, p.w_c]), p.b_c])
    if p.in_ru is not None and p.in_c is not None:
        a = _norm_any(g, a, p.in_ru[0], p.in_ru[1], opts)
        c = _norm_any(g, c, p.in_c[0], p.in_c[1], opts)
    return a, c


def _gru_step(g: _Graph, h: str, a_t: str, c_t: str, m_t: str | None, p: _GruParams, opts: _Opts) -> str:
    """One GRU-family step on (B, d) state; returns the new state, masked unless ``m_t`` is None."""
    d = opts.d
    if opts.split_gemm:
        assert p.u_ru is not None and p.u_c is not None
        # plain gru: fuse the precomputed input term into the GEMM's C operand
        pre = g.op("Gemm", [h, p.u_ru, a_t]) if p.hh_ru is None else g.op("MatMul", [h, p.u_ru])
        cand = g.op("MatMul", [h, p.u_c])
    else:
        assert p.u_all is not None
        split = g.cached("c_split_2d_d", np.array([2 * d, d], np.int64))
        pre, cand = g.op_multi("Split", [g.op("MatMul", [h, p.u_all]), split], 2, axis=-1)
        if p.hh_ru is None:
            pre = g.op("Add", [pre, a_t])
    if p.hh_ru is not None and p.hh_c is not None:
        pre = g.op("Add", [_norm_any(g, pre, p.hh_ru, None, opts), a_t])
        cand = _norm_any(g, cand, p.hh_c[0], p.hh_c[1], opts)
    r, u = (
        g.op_multi("Split", [g.op("Sigmoid", [pre])], 2, axis=-1, num_outputs=2)
        if opts.opset >= 18
        else g.op_multi("Split", [g.op("Sigmoid", [pre])], 2, axis=-1)
    )
    hh = g.op("Tanh", [g.op("Add", [g.op("Mul", [r, cand]), c_t])])
    if opts.update == "lerp":  # h' = hh + u * (h - hh)
        h_new = g.op("Add", [hh, g.op("Mul", [u, g.op("Sub", [h, hh])])])
    else:  # h' = u * h + (1 - u) * hh, the literal spec form
        one = g.cached("c_one", np.array(1.0, np.float32))
        h_new = g.op("Add", [g.op("Mul", [u, h]), g.op("Mul", [g.op("Sub", [one, u]), hh])])
    return h_new if m_t is None else g.op("Where", [m_t, h_new, h])


@dataclass
class _LstmParams:
    """Initializer names used by the LSTM-family step and input side."""

    w: str
    b: str
    b_post: str | None
    u: str
    in_norm: tuple[str, str | None] | None
    hh: str | None
    cell_norm: tuple[str, str | None] | None


def _lstm_params(
    g: _Graph, cell: str, weights: Mapping[str, np.ndarray], n_in: int, opts: _Opts
) -> _LstmParams:
    """Theano gate order i, f, o, g is kept; b goes in twice (pre-norm and post-norm, spec §4.4-4.6)."""
    d = opts.d
    w = _need(weights, "weight_ih", (4 * d, n_in)).T
    u = _need(weights, "weight_hh", (4 * d, d)).T
    b = _need(weights, "bias", (4 * d,))
    if cell == "lstm":
        b_post = g.const(_f32(b), "b_post")
        return _LstmParams(
            w=g.const(_f32(w), "W"),
            b=g.const(_f32(b), "b"),
            b_post=b_post,
            u=g.const(_f32(u), "U"),
            in_norm=None,
            hh=None,
            cell_norm=None,
        )
    has_bias = cell == "lnlstm"
    norms = {}
    for name in _LSTM_NORMS:
        size = d if name == "norm_cell" else 4 * d
        gain = _need(weights, f"{name}.weight", (size,))
        beta = _need(weights, f"{name}.bias", (size,)) if has_bias else np.zeros(size)
        norms[name] = (gain, beta)
    b_pre = b
    if has_bias and opts.norm == "meanshift":
        w, b_pre = _centre(w, b)
        u, _ = _centre(u, None)
    # post-norm: LN1(p) + LN2(hU) + b, with b1 + b2 + b folded into the hoisted input norm's bias
    beta_in = norms["norm_ih"][1] + norms["norm_hh"][1] + b
    return _LstmParams(
        w=g.const(_f32(w), "W"),
        b=g.const(_f32(b_pre), "b"),
        b_post=None,
        u=g.const(_f32(u), "U"),
        in_norm=(g.const(_f32(norms["norm_ih"][0]), "s_ih"), g.const(_f32(beta_in), "b_ih_plus_hh_plus_b")),
        hh=g.const(_f32(norms["norm_hh"][0]), "s_hh"),
        cell_norm=(
            g.const(_f32(norms["norm_cell"][0]), "s_cell"),
            g.const(_f32(norms["norm_cell"][1]), "b_cell") if has_bias else None,
        ),
    )


def _lstm_inputs(g: _Graph, x: str, p: _LstmParams, opts: _Opts) -> str:
    """Hoisted input side: P = xW + b (+ b again, or normalised with b1 + b2 + b folded in), (T, B, 4d)."""
    pre = g.op("Add", [g.op("MatMul", [x, p.w]), p.b])
    if p.in_norm is None:
        assert p.b_post is not None
        return g.op("Add", [pre, p.b_post])
    return _norm_any(g, pre, p.in_norm[0], p.in_norm[1], opts)


def _lstm_step(
    g: _Graph, h: str, c: str, p_t: str, m_t: str | None, p: _LstmParams, opts: _Opts
) -> tuple[str, str]:
    """One LSTM-family step; the carried cell is the un-normalised c, the mask applies to c and h."""
    d = opts.d
    rec = g.op("MatMul", [h, p.u])
    if p.hh is not None:
        rec = _norm_any(g, rec, p.hh, None, opts)
    q = g.op("Add", [rec, p_t])
    split = g.cached("c_split_3d_d", np.array([3 * d, d], np.int64))
    q_ifo, q_g = g.op_multi("Split", [q, split], 2, axis=-1)
    split3 = g.cached("c_split_d3", np.array([d, d, d], np.int64))
    i, f, o = g.op_multi("Split", [g.op("Sigmoid", [q_ifo]), split3], 3, axis=-1)
    c_new = g.op("Add", [g.op("Mul", [f, c]), g.op("Mul", [i, g.op("Tanh", [q_g])])])
    if m_t is not None:
        c_new = g.op("Where", [m_t, c_new, c])
    cn = c_new
    if p.cell_norm is not None:
        cn = _norm_any(g, c_new, p.cell_norm[0], p.cell_norm[1], opts, centred=False)
    h_new = g.op("Mul", [o, g.op("Tanh", [cn])])
    return (h_new if m_t is None else g.op("Where", [m_t, h_new, h])), c_new


# --------------------------------------------------------------------------------------------------- forms


def _vi(name: str, elem: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _zeros_state(g: _Graph, x: str, d: int) -> str:
    """Zero (B, d) initial state with B taken from x at run time."""
    b = g.op("Shape", [x], start=1, end=2)
    dim = g.cached("c_state_dim", np.array([d], np.int64))
    return g.op(
        "ConstantOfShape",
        [g.op("Concat", [b, dim], axis=0)],
        value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]),
    )


def _native_gru(g: _Graph, weights: Mapping[str, np.ndarray], n_in: int, d: int) -> str:
    """Plain gru as the ONNX GRU op: gates reordered to z, r, h, linear_before_reset=1, Rb = 0 (spec §11)."""
    w_ih = _need(weights, "weight_ih", (3 * d, n_in))
    b_ih = _need(weights, "bias_ih", (3 * d,))
    w_hh = _need(weights, "weight_hh", (3 * d, d))

    def zrh(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a[d : 2 * d], a[:d], a[2 * d :]], axis=0)

    w = g.const(_f32(zrh(w_ih))[None], "gru_W")
    r = g.const(_f32(zrh(w_hh))[None], "gru_R")
    bias = g.const(_f32(np.concatenate([zrh(b_ih), np.zeros(3 * d)]))[None], "gru_B")
    lens = g.op("Cast", ["lengths"], to=TensorProto.INT32)
    _, y_h = g.op_multi("GRU", ["x", w, r, bias, lens], 2, hidden_size=d, linear_before_reset=1)
    axes0 = g.cached("c_axes0", np.array([0], np.int64))
    return g.op("Squeeze", [y_h, axes0])


def build_recurrent_encoder_graph(
    cell: str,
    weights: dict[str, np.ndarray],
    *,
    opset: int = 18,
    form: str = "scan",
    steps: int | None = None,
    norm: str = "auto",
    split_gemm: bool = True,
    update: str = "lerp",
    mask: str = "gather",
    check: bool = True,
) -> onnx.ModelProto:
    """Build the encoder graph ``(x (T,B,n_in) f32, lengths (B,) i64) -> h (B,d) f32``.

    ``h`` is the state after each row's last valid step (mask carry from a zero state); no l2 normalisation.

    Keyword-only extras (all forms are exact to float32 rounding; defaults are the fastest measured on the
    2-core dev CPU: Scan + gather-last + LayerNormalization op, ~0.8 of the MLAS FLOP ceiling at B >= 128):
      form: "scan" (dynamic T, ONNX Scan), "loop" (dynamic T, ONNX Loop), "unrolled" (fixed T = ``steps``,
        one graph per length bucket, straight-line so CUDA graphs can capture it), "native" (ONNX GRU op,
        plain gru only). Passing ``steps`` without ``form`` selects "unrolled".
      norm: "op" (LayerNormalization, opset >= 17), "manual" (ReduceMean/Sub/Pow/... pattern), "meanshift"
        (centre the projections per norm group offline so LN becomes RMS + beta, spec §11), "auto" = "op" when
        the opset has LayerNormalization, else "manual".
      split_gemm: two recurrent GEMMs (h@U_ru, h@U_c) instead of one (h@[U|Ux]) + Split (a copy per step).
      update: "lerp" (h' = hh + u*(h - hh), 3 ops) or "spec" (u*h + (1-u)*hh, 4 ops); equal up to rounding.
      mask: "where" (exact per-step select, spec §2) or "gather" (run unmasked, keep every step's state and
        gather each row's state at step length-1, spec §11; equal bit for bit, two ops fewer a step).
      check: run ``onnx.checker`` on the result (for graphs written to disk). A graph handed straight to
        onnxruntime skips it: ORT validates what it loads, and the checker re-serialises every weight (~0.2 s
        of CPU per start for a 620 -> 2400 skip-thoughts model).
    """
    if cell not in CELL_TYPES:
        raise ValueError(f"unknown cell {cell!r}; expected one of {CELL_TYPES}")
    if steps is not None and form == "scan":
        form = "unrolled"
    if form not in GRAPH_FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {GRAPH_FORMS}")
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

    w_ih = np.asarray(weights["weight_ih"])
    n_in = int(w_ih.shape[1])
    d = int(np.asarray(weights["weight_hh"]).shape[1])
    opts = _Opts(cell=cell, d=d, opset=opset, norm=norm, split_gemm=split_gemm, update=update)
    g = _Graph(prefix="", inits={})
    t_dim: int | str = steps if form == "unrolled" and steps is not None else "T"
    graph_inputs = [_vi("x", TensorProto.FLOAT, [t_dim, "B", n_in]), _vi("lengths", TensorProto.INT64, ["B"])]
    lstm = cell.endswith("lstm")

    if form == "native":
        out = _native_gru(g, weights, n_in, d)
    else:
        gp = None if lstm else _gru_params(g, cell, weights, n_in, opts)
        lp = _lstm_params(g, cell, weights, n_in, opts) if lstm else None
        if lp is not None:
            seqs = [_lstm_inputs(g, "x", lp, opts)]
        else:
            assert gp is not None
            seqs = list(_gru_inputs(g, "x", gp, opts))
        lens_col = g.op("Unsqueeze", ["lengths", g.const(np.array([1], np.int64), "c_axes1")])  # (B, 1)
        h0 = _zeros_state(g, "x", d)
        states = [h0, h0] if lstm else [h0]

        masked = mask == "where"

        def step(sg: _Graph, st: list[str], xs: list[str], m_t: str | None) -> list[str]:
            m_t = m_t if masked else None
            if lp is not None:
                h_new, c_new = _lstm_step(sg, st[0], st[1], xs[0], m_t, lp, opts)
                return [h_new, c_new]
            assert gp is not None
            return [_gru_step(sg, st[0], xs[0], xs[1], m_t, gp, opts)]

        if form == "unrolled":
            assert steps is not None
            # One Split per hoisted sequence (a single pass over it) instead of a Gather copy per step;
            # Squeeze aliases its input in ORT, so the per-step slices cost no further copies.
            axes0 = g.cached("c_axes0", np.array([0], np.int64))
            pieces = [
                g.op_multi("Split", [s], steps, axis=0, num_outputs=steps)
                if opts.opset >= 18
                else g.op_multi("Split", [s, g.cached("c_ones_t", np.ones(steps, np.int64))], steps, axis=0)
                for s in seqs
            ]
            hs = []
            for t in range(steps):
                xs = [g.op("Squeeze", [ps[t], axes0]) for ps in pieces]
                m_t = g.op("Less", [g.const(np.array(t, np.int64), f"c_t{t}"), lens_col]) if masked else None
                states = step(g, states, xs, m_t)
                hs.append(states[0])
            out = states[0] if masked else g.op("Concat", [g.op("Unsqueeze", [h, axes0]) for h in hs], axis=0)
        elif form == "loop":
            body = g.sub("loop_")
            it, cond_in = "loop_iter", "loop_cond_in"
            st_in = [f"loop_state_in{k}" for k in range(len(states))]
            xs = [body.op("Gather", [s, it], axis=0) for s in seqs]
            m_t = body.op("Less", [it, lens_col]) if masked else None
            st_out = step(body, st_in, xs, m_t)
            cond_out = body.op("Identity", [cond_in])
            scan_out = [] if masked else [body.op("Identity", [st_out[0]])]
            body_graph = helper.make_graph(
                body.nodes,
                "loop_body",
                [_vi(it, TensorProto.INT64, []), _vi(cond_in, TensorProto.BOOL, [])]
                + [_vi(n, TensorProto.FLOAT, ["B", d]) for n in st_in],
                [_vi(cond_out, TensorProto.BOOL, [])]
                + [_vi(n, TensorProto.FLOAT, ["B", d]) for n in st_out + scan_out],
            )
            trip = g.op("Shape", ["x"], start=0, end=1)
            trip = g.op("Squeeze", [trip, g.cached("c_axes0", np.array([0], np.int64))])
            outs = g.op_multi("Loop", [trip, "", *states], len(states) + len(scan_out), body=body_graph)
            out = outs[-1] if scan_out else outs[0]
        else:  # scan
            body = g.sub("scan_")
            st_in = [f"scan_state_in{k}" for k in range(len(states))]
            x_in = [f"scan_x_in{k}" for k in range(len(seqs))]
            m_in = "scan_m_in"
            st_out = step(body, st_in, x_in, m_in)
            scan_out = [] if masked else [body.op("Identity", [st_out[0]])]
            widths = [4 * d] if lstm else [2 * d, d]
            body_graph = helper.make_graph(
                body.nodes,
                "scan_body",
                [_vi(n, TensorProto.FLOAT, ["B", d]) for n in st_in]
                + [_vi(n, TensorProto.FLOAT, ["B", w]) for n, w in zip(x_in, widths, strict=True)]
                + ([_vi(m_in, TensorProto.BOOL, ["B", 1])] if masked else []),
                [_vi(n, TensorProto.FLOAT, ["B", d]) for n in st_out + scan_out],
            )
            t_len = g.op("Shape", ["x"], start=0, end=1)
            t_len = g.op("Squeeze", [t_len, g.cached("c_axes0", np.array([0], np.int64))])
            rng = g.op(
                "Range",
                [
                    g.const(np.array(0, np.int64), "c_zero_i64"),
                    t_len,
                    g.cached("c_one_i64", np.array(1, np.int64)),
                ],
            )
            rng = g.op("Unsqueeze", [rng, g.const(np.array([1, 2], np.int64), "c_axes12")])  # (T, 1, 1)
            lens_row = g.op("Unsqueeze", [lens_col, g.cached("c_axes0", np.array([0], np.int64))])
            mask_t = g.op("Less", [rng, lens_row])
            scan_in = [*seqs, mask_t] if masked else seqs
            outs = g.op_multi(
                "Scan",
                [*states, *scan_in],
                len(states) + len(scan_out),
                body=body_graph,
                num_scan_inputs=len(scan_in),
            )
            out = outs[-1] if scan_out else outs[0]
        if not masked:  # out is every step's state (T, B, d): take each row's state at step length - 1
            one = g.cached("c_one_i64", np.array(1, np.int64))
            last = g.op("Sub", ["lengths", one])
            last = g.op("Unsqueeze", [last, g.cached("c_axes02", np.array([0, 2], np.int64))])  # (1, B, 1)
            shape = g.op(
                "Concat",
                [
                    g.cached("c_one_1d", np.array([1], np.int64)),
                    g.op("Shape", ["x"], start=1, end=2),
                    g.cached("c_state_dim", np.array([d], np.int64)),
                ],
                axis=0,
            )
            picked = g.op("GatherElements", [out, g.op("Expand", [last, shape])], axis=0)
            out = g.op("Squeeze", [picked, g.cached("c_axes0", np.array([0], np.int64))])

    g.nodes.append(helper.make_node("Identity", [out], ["h"], name="output_h"))
    graph = helper.make_graph(
        g.nodes,
        f"{cell}_encoder",
        graph_inputs,
        [_vi("h", TensorProto.FLOAT, ["B", d])],
        list(g.inits.values()),
    )
    return _model(graph, opset, check=check)


def _model(graph: onnx.GraphProto, opset: int, *, check: bool = True) -> onnx.ModelProto:
    """Wrap a graph with the lowest IR version the opset needs (ORT refuses IRs newer than it knows)."""
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(
        graph,
        opset_imports=opsets,
        producer_name="lnserve.converters.onnx_graph",
        ir_version=helper.find_min_ir_version_for(opsets),
    )
    if check:
        onnx.checker.check_model(model)
    return model


def build_image_encoder_graph(weight: np.ndarray, bias: np.ndarray, *, opset: int = 18) -> onnx.ModelProto:
    """OE image encoder ``projected = features @ weight.T + bias`` (spec §6.2 linear layer, no normalisation).

    ``weight`` is PyTorch (d, dim_image); one Gemm with transB so the weight is stored as given.
    """
    weight = np.asarray(weight, dtype=np.float32)
    bias = np.asarray(bias, dtype=np.float32)
    if weight.ndim != 2 or bias.shape != (weight.shape[0],):
        raise ValueError(f"weight {weight.shape} / bias {bias.shape} are not a (d, dim_image) linear layer")
    d, dim_image = weight.shape
    inits = [numpy_helper.from_array(weight, "ff_image_W"), numpy_helper.from_array(bias, "ff_image_b")]
    node = helper.make_node("Gemm", ["features", "ff_image_W", "ff_image_b"], ["projected"], transB=1)
    graph = helper.make_graph(
        [node],
        "image_encoder",
        [_vi("features", TensorProto.FLOAT, ["B", dim_image])],
        [_vi("projected", TensorProto.FLOAT, ["B", d])],
        inits,
    )
    return _model(graph, opset)
