"""The encoder graphs' matrix products, per precision: float32 ``MatMul``, or int8 with float32 around it.

A cell asks for two kinds of product, and int8 quantises each by what is known about its left operand:

* ``by_token``: the hoisted input projection ``x @ W`` over all T*B tokens. Word vectors have no fixed
  range, so each token row gets its own scale (its largest magnitude): a row's result never depends on the
  other rows of the batch, so batching and padding cannot change an int8 vector.
* ``by_state``: the recurrent ``h @ U``. A GRU or LSTM state is a convex mix of tanh values (or ``o *
  tanh``), so ``|h| <= 1`` always: one fixed scale, no statistics, no calibration set. A calibrated
  artifact (``lnserve calibrate``, ``runtime.calibration``) gives each state feature its own peak ``p``
  measured on real text: the product becomes ``clip(h / p, -1, 1) @ (p * U)``, the same maths with each
  feature's range spread over every level (the peaks are 0.7-1.0 on the demo model's captions, and the
  levels matter most for the AVX2 scheme's 64 a side).

Weights are int8, symmetric per output column (``|q| <= 127``). Activations are uint8 around a zero point,
in one of two schemes (``Int8Scheme``), picked for the CPU by the runtime:

* ``FULL``: [1, 255], 127 levels a side. Exact where the kernel accumulates u8 x s8 products in 32 bits
  (AVX-512 VNNI, AVX-VNNI, AMX: ``vpdpbusd`` / tiles).
* ``PAIR_SAFE``: [0, 128], 64 levels a side, for AVX2 without VNNI, whose ``vpmaddubsw`` sums each pair of
  products into a saturating int16: 2 * 128 * 127 = 32,512 fits, so the integers stay exact. (With full
  activations a pair reaches 64,770; onnxruntime's remedy, 7-bit weights, measured a lower cosine to fp32
  than 7-bit activations: 0.99949 against 0.99959 at the published size.)

Everything else (norms, gates, the state) stays float32. The two schemes' fidelity is measured on any CPU
(both run everywhere): ``benchmarks/precision_contract.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from .builder import GraphBuilder, f32

MS_DOMAIN = "com.microsoft"  # MatMulIntegerToFloat: onnxruntime's contrib op (CPU: MLAS u8s8 kernels)
WEIGHT_LEVELS = 127  # symmetric int8 weights
INT16_MAX = 32767


@dataclass(frozen=True)
class Int8Scheme:
    """How activations with ``|v| <= 1`` become uint8: ``q = round(v * levels) + zero_point``."""

    name: str
    levels: int
    zero_point: int

    @property
    def pair_bound(self) -> int:
        """The largest magnitude of a sum of two u8 x s8 products (what ``vpmaddubsw`` holds in int16)."""
        return 2 * (self.zero_point + self.levels) * WEIGHT_LEVELS


FULL = Int8Scheme("full", levels=127, zero_point=128)
PAIR_SAFE = Int8Scheme("pair-safe", levels=64, zero_point=64)
SCHEMES = {s.name: s for s in (FULL, PAIR_SAFE)}


class Gemms(Protocol):
    """How a cell's weights are stored and multiplied."""

    domains: ClassVar[Mapping[str, int]]  # extra opset domains the products need

    def weight(self, g: GraphBuilder, w: np.ndarray, name: str, *, state: bool = False) -> str: ...

    def by_token(self, g: GraphBuilder, x: str, w: str) -> str: ...

    def by_state(self, g: GraphBuilder, h: str, w: str) -> str: ...

    def by_state_plus(self, g: GraphBuilder, h: str, w: str, c: str) -> str: ...


class Float32Gemms:
    """The exact profile: float32 weights and ``MatMul``."""

    domains: ClassVar[Mapping[str, int]] = {}

    def weight(self, g: GraphBuilder, w: np.ndarray, name: str, *, state: bool = False) -> str:
        return g.const(f32(w), name)

    def by_token(self, g: GraphBuilder, x: str, w: str) -> str:
        return g.op("MatMul", [x, w])

    def by_state(self, g: GraphBuilder, h: str, w: str) -> str:
        return g.op("MatMul", [h, w])

    def by_state_plus(self, g: GraphBuilder, h: str, w: str, c: str) -> str:
        """h @ w + c as one Gemm: c rides in as its C operand."""
        return g.op("Gemm", [h, w, c])


def quantize_columns(w: np.ndarray, levels: int = WEIGHT_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, float32 scale per column): symmetric, ``|q| <= levels``; a zero column gets scale 1."""
    w = f32(w)
    peak = np.abs(w).max(axis=0)
    scale = np.where(peak > 0, peak / levels, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -levels, levels).astype(np.int8)
    return q, scale


class Int8Gemms:
    """uint8 x int8 products through ``MatMulIntegerToFloat`` (int32 sums, scaled back to float32)."""

    domains: ClassVar[Mapping[str, int]] = {MS_DOMAIN: 1}

    def __init__(self, scheme: Int8Scheme = FULL, state_peaks: np.ndarray | None = None) -> None:
        self.scheme = scheme
        self.state_peaks = None if state_peaks is None else f32(state_peaks)  # (d,) in (0, 1]: calibrated
        # a value multiplied by several weights (x by W_ru and W_c, h by U_ru and U_c in the plain graph)
        # is scaled and quantised once: (value name, by row) -> (its uint8 value, its row peak or None)
        self._quantised: dict[tuple[str, bool], tuple[str, str | None]] = {}

    def weight(self, g: GraphBuilder, w: np.ndarray, name: str, *, state: bool = False) -> str:
        """The int8 matrix under ``name``, its column scales under ``name_scale``; a ``state`` weight (one
        multiplied by h) of a calibrated cell has each row scaled up by its feature's peak first."""
        if state and self.state_peaks is not None:
            w = self.state_peaks[:, None] * f32(w)
        q, scale = quantize_columns(w)
        stored = g.const(q, name)
        g.cached(f"{stored}_scale", scale)
        return stored

    def _quantise(self, g: GraphBuilder, v: str, *, by_row: bool) -> tuple[str, str | None]:
        """v as uint8 with the fixed activation scale: |v| <= 1 as it is (a state), or each row divided by
        its own peak first (``by_row``: word vectors); the peak is returned to scale the product back."""
        if (v, by_row) not in self._quantised:
            peak = None
            if by_row:
                tiny = g.cached("q_tiny", np.array(np.finfo(np.float32).tiny, np.float32))
                peak = g.op("Max", [g.op("ReduceMax", [g.op("Abs", [v]), _last_axis(g)], keepdims=1), tiny])
            scaled = v if peak is None else g.op("Div", [v, peak])
            if not by_row and self.state_peaks is not None:  # a calibrated state: h / p, clipped to [-1, 1]
                inverse = g.cached("q_state_inv_peaks", (1.0 / self.state_peaks).astype(np.float32))
                one = g.cached("q_one", np.array(1.0, np.float32))
                minus_one = g.cached("q_minus_one", np.array(-1.0, np.float32))
                scaled = g.op("Clip", [g.op("Mul", [v, inverse]), minus_one, one])
            vq = g.op("QuantizeLinear", [scaled, self._act_scale(g), self._act_zero(g)])
            self._quantised[v, by_row] = (vq, peak)
        return self._quantised[v, by_row]

    def _act_scale(self, g: GraphBuilder) -> str:
        return g.cached("q_act_scale", np.array(1.0 / self.scheme.levels, np.float32))

    def _act_zero(self, g: GraphBuilder) -> str:
        return g.cached("q_act_zero", np.array(self.scheme.zero_point, np.uint8))

    def _product(self, g: GraphBuilder, vq: str, w: str) -> str:
        """The float32 product of a quantised activation and an int8 weight."""
        return g.op(
            "MatMulIntegerToFloat",
            [vq, w, self._act_scale(g), f"{w}_scale", self._act_zero(g)],  # no b_zero_point: symmetric
            domain=MS_DOMAIN,
        )

    def by_state(self, g: GraphBuilder, h: str, w: str) -> str:
        return self._product(g, self._quantise(g, h, by_row=False)[0], w)

    def by_state_plus(self, g: GraphBuilder, h: str, w: str, c: str) -> str:
        return g.op("Add", [self.by_state(g, h, w), c])

    def by_token(self, g: GraphBuilder, x: str, w: str) -> str:
        """Each row scaled into [-1, 1] by its own peak, multiplied, and scaled back."""
        xq, peak = self._quantise(g, x, by_row=True)
        assert peak is not None
        return g.op("Mul", [self._product(g, xq, w), peak])


def _last_axis(g: GraphBuilder) -> str:
    return g.cached("c_axes_last", np.array([-1], np.int64))


def gemms_for(precision: str, scheme: Int8Scheme = FULL, state_peaks: np.ndarray | None = None) -> Gemms:
    """The products of a precision profile built by this module (fp16 is a conversion of the fp32 graph);
    ``state_peaks``: int8's calibrated per-feature state ranges, if any."""
    if precision == "int8":
        return Int8Gemms(scheme, state_peaks)
    if precision == "fp32":
        return Float32Gemms()
    raise ValueError(f"no {precision} products in the graph builder (fp32 or int8)")
