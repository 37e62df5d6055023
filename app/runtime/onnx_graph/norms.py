"""The norms of the legacy cells (spec §3) over the last axis, eps inside the square root.

LayerNorm uses the ``LayerNormalization`` op (opset >= 17, population variance like Theano); RMSNorm uses the
``RMSNormalization`` op from opset 23 and before that the ReduceMean/Sqrt pattern that ORT fuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ....models.cell_types import NORM_EPS as EPS
from .builder import GraphBuilder, f32, need

NormArrays = tuple[np.ndarray, np.ndarray | None]  # (gain, bias); no bias in the RMS cells


@dataclass(frozen=True)
class Norm:
    """Initializer names of one norm's gain and bias (``None``: no bias is added)."""

    gain: str
    bias: str | None = None


def read_norms(
    weights: Mapping[str, np.ndarray], sizes: Mapping[str, int], *, with_bias: bool
) -> dict[str, NormArrays]:
    """``{name: (gain, bias)}`` from ``<name>.weight`` / ``<name>.bias`` (LN cells only have the bias)."""
    return {
        name: (
            need(weights, f"{name}.weight", (size,)),
            need(weights, f"{name}.bias", (size,)) if with_bias else None,
        )
        for name, size in sizes.items()
    }


def add_norm(
    g: GraphBuilder, gain_name: str, gain: np.ndarray, bias_name: str = "", bias: np.ndarray | None = None
) -> Norm:
    """Register one norm's gain (and bias, if any) as initializers."""
    return Norm(g.const(f32(gain), gain_name), None if bias is None else g.const(f32(bias), bias_name))


def layer_norm(g: GraphBuilder, z: str, norm: Norm) -> str:
    """LN(z; bias, gain) as the ``LayerNormalization`` op."""
    inputs = [z, norm.gain] if norm.bias is None else [z, norm.gain, norm.bias]
    return g.op("LayerNormalization", inputs, axis=-1, epsilon=EPS)


def rms_norm(g: GraphBuilder, z: str, gain: str, opset: int) -> str:
    """RMS(z; gain): the standard op from opset 23, else the pattern ORT fuses."""
    if opset >= 23:
        return g.op("RMSNormalization", [z, gain], axis=-1, epsilon=EPS)
    two = g.cached("c_two", np.array(2.0, np.float32))
    eps = g.cached("c_eps", np.array(EPS, np.float32))
    square = g.op("Pow", [z, two])
    if opset >= 18:  # ReduceMean takes its axes as an input from opset 18, as an attribute before
        ms = g.op("ReduceMean", [square, g.cached("c_axes_last", np.array([-1], np.int64))], keepdims=1)
    else:
        ms = g.op("ReduceMean", [square], axes=[-1], keepdims=1)
    y = g.op("Div", [z, g.op("Sqrt", [g.op("Add", [ms, eps])])])
    return g.op("Mul", [y, gain])


def cell_norm(g: GraphBuilder, z: str, norm: Norm, *, cell: str, opset: int) -> str:
    """The norm of a cell type: LN for ``ln*`` cells, RMS (then the bias, if any) for ``rln*`` cells."""
    if not cell.startswith("rln"):
        return layer_norm(g, z, norm)
    y = rms_norm(g, z, norm.gain, opset)
    return y if norm.bias is None else g.op("Add", [y, norm.bias])


class NormedCell:
    """The one ``norm`` of the GRU and LSTM graph cells: ``cell_norm`` for their cell type. A method, not a
    call to ``cell_norm``, because benchmarks/graph_variants.py overrides it to try other norm graphs."""

    cell: str
    opset: int

    def norm(self, g: GraphBuilder, z: str, norm: Norm) -> str:
        return cell_norm(g, z, norm, cell=self.cell, opset=self.opset)
