"""The recurrent encoder graph ``(x (T, B, n_in) f32, lengths (B,) i64) -> h (B, d) f32`` (spec §2-§4, §11).

``h`` is each row's state after its last valid step, from a zero state; no l2 normalisation. The production
form, the fastest measured on the development CPU (``benchmarks/onnx_graph_forms.py``):

1. the cell's weights become initializers, stored once; the loop body reads them from the outer scope;
2. the input projections and input-side norms run for all T*B tokens as one GEMM, before the recurrence;
3. an ONNX ``Scan`` runs the cell's step from a zero state and keeps every step's state;
4. each row's state at step length-1 is gathered once at the end (spec §11), bit-identical to the per-step
   ``Where(t < length, h', h)`` mask carry of spec §2 and two ops a step cheaper.

The alternatives that were measured and lost (an unrolled fixed-T graph, the per-step mask, one recurrent
GEMM + Split, hand-written and mean-shift norms) are in ``benchmarks/graph_variants.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper

from ....models.cell_types import CELL_TYPES, LSTM_CELLS
from ..fused_op import DOMAIN, DOMAIN_VERSION, FUSED_CELLS
from .builder import MIN_OPSET, GraphBuilder, make_model, value_info
from .fused import FusedGruCell, gru_sequence
from .gemms import FULL, SCHEMES, Gemms, gemms_for
from .gru import GruCell, native_gru, read_gru
from .lstm import LstmCell, read_lstm

GRAPH_FORMS: tuple[str, ...] = ("scan", "loop", "native")
X, LENGTHS, H = "x", "lengths", "h"  # the graph's inputs and output
STATES = "states"  # every step's state (T, B, d): the optional output that calibration reads


class RecurrentCell(Protocol):
    """What the recurrence needs from a cell (``GruCell``, ``LstmCell``)."""

    d: int
    n_states: int  # h first, then any other carried state
    seq_widths: list[int]  # feature width of each hoisted input sequence

    def hoisted_inputs(self, g: GraphBuilder, x: str) -> list[str]: ...

    def step(self, g: GraphBuilder, states: list[str], xs: list[str]) -> list[str]: ...


def build_recurrent_encoder_graph(
    cell: str,
    weights: Mapping[str, np.ndarray],
    *,
    opset: int = 18,
    form: str = "scan",
    check: bool = True,
    fused: bool = False,
    precision: str = "fp32",
    int8_scheme: str = FULL.name,
    state_peaks: np.ndarray | None = None,
    every_state: bool = False,
    sequence_op: bool = False,
) -> onnx.ModelProto:
    """Build the encoder graph of one recurrent part from its weights (module naming, PyTorch layout).

    form: "scan" (ONNX Scan, dynamic T), "loop" (ONNX Loop, dynamic T; the same maths), or "native" (the ONNX
    GRU op, plain gru only). All are exact to float32 rounding. ``check``: run ``onnx.checker`` (see
    ``make_model``). ``fused``: lngru / rlngru steps as one ``ai.lnserve`` custom op after the GEMMs
    (``onnx_graph.fused``; runs only where ``runtime.fused_op`` is registered, never exported).
    ``precision``: ``fp32`` or ``int8`` products (``onnx_graph.gemms``; int8 runs on onnxruntime only), int8
    with the activation scheme named by ``int8_scheme`` (``gemms.SCHEMES``) and, if calibrated, the state's
    per-feature ``state_peaks`` (d,). ``every_state``: also output every step's state as ``states`` (T, B,
    d), for ``runtime.calibration``. ``sequence_op`` (with ``fused``, fp32, the scan form): the whole
    recurrence as one custom op instead of the Scan (``onnx_graph.fused``).
    """
    check_options(cell, form, opset)
    if precision != "fp32" and form == "native":
        raise ValueError(f"the native ONNX GRU op has no {precision} form; use the scan or loop form")
    if every_state and form == "native":
        raise ValueError("every step's state is an output of the scan and loop forms only")
    gemms = gemms_for(precision, SCHEMES[int8_scheme], state_peaks)
    if fused and (cell not in FUSED_CELLS or form == "native"):
        raise ValueError(f"the fused step is for cells {FUSED_CELLS} in the scan or loop form")
    if sequence_op and not (fused and precision == "fp32" and form == "scan" and not every_state):
        raise ValueError("the sequence op replaces the scan form of a fused fp32 graph with no states output")
    n_in, d = encoder_dims(weights)
    g = GraphBuilder()
    if sequence_op:
        h = gru_sequence(g, cell, read_gru(cell, weights, n_in, d), X, LENGTHS)
    elif form == "native":
        h = native_gru(g, weights, X, LENGTHS, n_in, d)
    else:
        rnn = make_cell(g, cell, weights, n_in, d, opset, fused=fused, gemms=gemms)
        seqs = rnn.hoisted_inputs(g, X)
        every_h = scan_every_state(g, rnn, seqs) if form == "scan" else loop_every_state(g, rnn, seqs)
        h = gather_last_valid(g, every_h, d)
        if every_state:
            g.nodes.append(helper.make_node("Identity", [every_h], [STATES], name="output_states"))
    domains = {**gemms.domains, **({DOMAIN: DOMAIN_VERSION} if fused else {})}
    return encoder_model(
        g, cell, h, t_dim="T", n_in=n_in, d=d, opset=opset, check=check, domains=domains, states=every_state
    )


def check_options(cell: str, form: str, opset: int) -> None:
    if cell not in CELL_TYPES:
        raise ValueError(f"unknown cell {cell!r}; expected one of {CELL_TYPES}")
    if form not in GRAPH_FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {GRAPH_FORMS}")
    if form == "native" and cell != "gru":
        raise ValueError("the native ONNX GRU op has no hook for norms: only cell='gru' can use it")
    if opset < MIN_OPSET:
        raise ValueError(f"opset {opset} < {MIN_OPSET}: the norms need the LayerNormalization op")


def encoder_dims(weights: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """(n_in, d) from the input and recurrent weight matrices."""
    return int(np.asarray(weights["weight_ih"]).shape[1]), int(np.asarray(weights["weight_hh"]).shape[1])


def make_cell(
    g: GraphBuilder,
    cell: str,
    weights: Mapping[str, np.ndarray],
    n_in: int,
    d: int,
    opset: int,
    *,
    fused: bool = False,
    gemms: Gemms | None = None,
) -> RecurrentCell:
    if cell in LSTM_CELLS:
        return LstmCell(g, cell, read_lstm(cell, weights, n_in, d), opset, gemms)
    gru_cell = FusedGruCell if fused else GruCell
    return gru_cell(g, cell, read_gru(cell, weights, n_in, d), opset, gemms)


def zero_state(g: GraphBuilder, d: int) -> str:
    """Zero (B, d) initial state with B taken from x at run time."""
    b = g.op("Shape", [X], start=1, end=2)
    dim = g.cached("c_state_dim", np.array([d], np.int64))
    return g.op(
        "ConstantOfShape",
        [g.op("Concat", [b, dim], axis=0)],
        value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]),
    )


def state_infos(names: list[str], d: int) -> list[onnx.ValueInfoProto]:
    return [value_info(n, TensorProto.FLOAT, ["B", d]) for n in names]


def scan_every_state(g: GraphBuilder, rnn: RecurrentCell, seqs: list[str]) -> str:
    """ONNX Scan of the cell's step over the hoisted sequences; returns every step's h (T, B, d)."""
    body = g.sub("scan_")
    st_in = [f"scan_state_in{k}" for k in range(rnn.n_states)]
    x_in = [f"scan_x_in{k}" for k in range(len(seqs))]
    st_out = rnn.step(body, st_in, x_in)
    h_out = body.op("Identity", [st_out[0]])  # the scan output: a body output name is used once
    body_graph = helper.make_graph(
        body.nodes,
        "scan_body",
        state_infos(st_in, rnn.d)
        + [value_info(n, TensorProto.FLOAT, ["B", w]) for n, w in zip(x_in, rnn.seq_widths, strict=True)],
        state_infos([*st_out, h_out], rnn.d),
    )
    h0 = zero_state(g, rnn.d)
    outs = g.op_multi(
        "Scan",
        [h0] * rnn.n_states + seqs,
        rnn.n_states + 1,
        body=body_graph,
        num_scan_inputs=len(seqs),
    )
    return outs[-1]


def loop_every_state(g: GraphBuilder, rnn: RecurrentCell, seqs: list[str]) -> str:
    """ONNX Loop over T gathering step t of each hoisted sequence; returns every step's h (T, B, d)."""
    body = g.sub("loop_")
    it, cond_in = "loop_iter", "loop_cond_in"
    st_in = [f"loop_state_in{k}" for k in range(rnn.n_states)]
    st_out = rnn.step(body, st_in, [body.op("Gather", [s, it], axis=0) for s in seqs])
    cond_out = body.op("Identity", [cond_in])
    h_out = body.op("Identity", [st_out[0]])  # the scan output: a body output name is used once
    counters = [value_info(it, TensorProto.INT64, []), value_info(cond_in, TensorProto.BOOL, [])]
    body_graph = helper.make_graph(
        body.nodes,
        "loop_body",
        [*counters, *state_infos(st_in, rnn.d)],
        [value_info(cond_out, TensorProto.BOOL, []), *state_infos([*st_out, h_out], rnn.d)],
    )
    h0 = zero_state(g, rnn.d)
    outs = g.op_multi("Loop", [time_steps(g), "", *[h0] * rnn.n_states], rnn.n_states + 1, body=body_graph)
    return outs[-1]


def time_steps(g: GraphBuilder) -> str:
    """T as a scalar, from x at run time."""
    t = g.op("Shape", [X], start=0, end=1)
    return g.op("Squeeze", [t, g.cached("c_axes0", np.array([0], np.int64))])


def gather_last_valid(g: GraphBuilder, every_h: str, d: int) -> str:
    """Each row's state at step length-1 from every step's state (T, B, d): one GatherElements."""
    one = g.cached("c_one_i64", np.array(1, np.int64))
    last = g.op("Sub", [LENGTHS, one])
    last = g.op("Unsqueeze", [last, g.cached("c_axes02", np.array([0, 2], np.int64))])  # (1, B, 1)
    shape = g.op(
        "Concat",
        [
            g.cached("c_one_1d", np.array([1], np.int64)),
            g.op("Shape", [X], start=1, end=2),
            g.cached("c_state_dim", np.array([d], np.int64)),
        ],
        axis=0,
    )
    picked = g.op("GatherElements", [every_h, g.op("Expand", [last, shape])], axis=0)  # (1, B, d)
    return g.op("Squeeze", [picked, g.cached("c_axes0", np.array([0], np.int64))])


def encoder_model(
    g: GraphBuilder,
    cell: str,
    h: str,
    *,
    t_dim: int | str,
    n_in: int,
    d: int,
    opset: int,
    check: bool = True,
    domains: Mapping[str, int] | None = None,
    states: bool = False,
) -> onnx.ModelProto:
    """Name the result ``h`` and wrap the graph with its inputs ``x (T, B, n_in)`` and ``lengths (B,)``
    (and, with ``states``, the ``states`` output already named in the graph)."""
    g.nodes.append(helper.make_node("Identity", [h], [H], name="output_h"))
    outputs = [value_info(H, TensorProto.FLOAT, ["B", d])]
    if states:
        outputs.append(value_info(STATES, TensorProto.FLOAT, [t_dim, "B", d]))
    graph = helper.make_graph(
        g.nodes,
        f"{cell}_encoder",
        [value_info(X, TensorProto.FLOAT, [t_dim, "B", n_in]), value_info(LENGTHS, TensorProto.INT64, ["B"])],
        outputs,
        list(g.inits.values()),
    )
    return make_model(graph, opset, check=check, domains=domains)
