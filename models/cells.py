"""One-step recurrent cells of the legacy code, in PyTorch (out, in) weight layout.

Every cell splits its work in two, so the input side can be hoisted out of the time loop:
``project_inputs`` maps all timesteps at once (the input GEMM and the input-side norms) to a tuple of
(T, B, k) tensors, one per norm group, so no concatenation copies them, and ``step`` applies the recurrent
part for one timestep to those tensors' rows of that step.

The two GEMMs (input projection, recurrent product) run in the weights' dtype (``gemm``): a backend may hold
``weight_ih`` / ``weight_hh`` in bfloat16 for the CPU's bf16 GEMM kernels while norms, gates, biases and the
state stay float32. Each slice of a GEMM's result goes back to float32 on its way into the next op (an add
with a float32 bias promotes inside its kernel; ``Tensor.to`` before a norm), so bf16 adds no full-width cast
and the norms read contiguous tensors. With float32 weights every cast returns its input (``Tensor.to`` of
the same dtype is the tensor itself), so fp32 results are bit-identical.

GRU family gate rows are [r; u; candidate] (Theano [W | Wx] transposed); LSTM family rows keep the
Theano order i, f, o, g. Biases ``bias_ih`` / ``bias`` are *pre-norm* biases and are never folded into
norm biases, because they shift the statistics.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from .cell_types import CELL_TYPES, GRU_CELLS, LSTM_CELLS
from .norms import make_norm

State = tuple[torch.Tensor, ...]
Projected = tuple[torch.Tensor, ...]  # the input side: GRU family (x_ru, x_c), LSTM family (x_q,)

__all__ = ["CELLS", "CELL_TYPES", "GRU_CELLS", "LSTM_CELLS", "gemm", "make_cell"]


def gemm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x W^T in ``weight``'s dtype (x cast to it; a no-op in float32). The caller takes each slice it uses
    back to the state's dtype, which costs nothing extra where an add with a float32 tensor follows."""
    return torch.matmul(x.to(weight.dtype), weight.t())


class GRUFamilyCell(nn.Module):
    """GRU with optional LN / RMS norms on four groups: [r|u] in, candidate in, [r|u] rec, candidate rec."""

    norm_kind: ClassVar[str | None] = None

    def __init__(self, input_size: int, hidden_size: int, *, partial_rms: float = 1.0) -> None:
        super().__init__()
        d = hidden_size
        self.input_size, self.hidden_size = input_size, d
        self.weight_ih = nn.Parameter(torch.zeros(3 * d, input_size))
        self.bias_ih = nn.Parameter(torch.zeros(3 * d))
        self.weight_hh = nn.Parameter(torch.zeros(3 * d, d))
        kind, p = self.norm_kind, partial_rms
        self.norm_ih_ru = make_norm(kind, 2 * d, partial=p)
        self.norm_ih_c = make_norm(kind, d, partial=p)
        self.norm_hh_ru = make_norm(kind, 2 * d, partial=p)
        self.norm_hh_c = make_norm(kind, d, partial=p)

    def initial_state(self, batch: int, like: torch.Tensor) -> State:
        return (like.new_zeros(batch, self.hidden_size),)

    def project_inputs(self, x: torch.Tensor) -> Projected:
        """(T, B, n_in) -> ((T, B, 2d), (T, B, d)): x W + b for every step, input-side norms applied."""
        d = self.hidden_size
        proj = gemm(x, self.weight_ih)  # (T, B, 3d) in the weights' dtype
        # Bias per slice: each sum is a new contiguous float32 tensor, which the norm reads without a copy.
        ru = self.norm_ih_ru(proj[..., : 2 * d] + self.bias_ih[: 2 * d])
        c = self.norm_ih_c(proj[..., 2 * d :] + self.bias_ih[2 * d :])
        return ru, c

    def step(self, x_proj: Projected, state: State) -> State:
        """One timestep: x_proj ((B, 2d), (B, d)), state (h,) with h (B, d)."""
        x_ru, x_c = x_proj
        (h,) = state
        d = self.hidden_size
        rec = gemm(h, self.weight_hh)  # (B, 3d) in the weights' dtype
        gates = torch.sigmoid(x_ru + self.norm_hh_ru(rec[:, : 2 * d].to(h.dtype)))
        r, u = gates[:, :d], gates[:, d:]
        # The reset multiplies the (normalised) recurrent candidate term; no recurrent candidate bias.
        candidate = torch.tanh(x_c + r * self.norm_hh_c(rec[:, 2 * d :].to(h.dtype)))
        return (u * h + (1.0 - u) * candidate,)


class GRUCell(GRUFamilyCell):
    """Plain legacy GRU (ivendrov/order-embedding, skip-thoughts)."""


class LNGRUCell(GRUFamilyCell):
    """Kiros layer-norm GRU (ryankiros/layer-norm)."""

    norm_kind = "ln"


class RMSGRUCell(GRUFamilyCell):
    """Zhang & Sennrich RMSNorm GRU (bzhangGo/rmsnorm)."""

    norm_kind = "rms"


class LSTMFamilyCell(nn.Module):
    """Legacy LSTM: gates i, f, o, g; ``bias`` added before the input norm and again after the norms."""

    norm_kind: ClassVar[str | None] = None

    def __init__(self, input_size: int, hidden_size: int, *, partial_rms: float = 1.0) -> None:
        super().__init__()
        d = hidden_size
        self.input_size, self.hidden_size = input_size, d
        self.weight_ih = nn.Parameter(torch.zeros(4 * d, input_size))
        self.weight_hh = nn.Parameter(torch.zeros(4 * d, d))
        self.bias = nn.Parameter(torch.zeros(4 * d))
        self.norm_ih = make_norm(self.norm_kind, 4 * d, partial=partial_rms)
        self.norm_hh = make_norm(self.norm_kind, 4 * d, partial=partial_rms)
        self.norm_cell = make_norm(self.norm_kind, d, partial=partial_rms)

    def initial_state(self, batch: int, like: torch.Tensor) -> State:
        zeros = like.new_zeros(batch, self.hidden_size)
        return (zeros, zeros.clone())

    def project_inputs(self, x: torch.Tensor) -> Projected:
        """(T, B, n_in) -> ((T, B, 4d),): norm(x W + b)."""
        return (self.norm_ih(gemm(x, self.weight_ih) + self.bias),)  # the float32 bias promotes the sum

    def step(self, x_proj: Projected, state: State) -> State:
        """One timestep: x_proj ((B, 4d),), state (h, c); the carried c is un-normalised, the cell norm
        feeds h only."""
        (x_q,) = x_proj
        h, c = state
        d = self.hidden_size
        rec = gemm(h, self.weight_hh).to(h.dtype)
        q = x_q + self.norm_hh(rec) + self.bias  # b added the second time
        i, f, o = (torch.sigmoid(q[:, k * d : (k + 1) * d]) for k in range(3))
        g = torch.tanh(q[:, 3 * d :])
        c_new = f * c + i * g
        return (o * torch.tanh(self.norm_cell(c_new)), c_new)


class LSTMCell(LSTMFamilyCell):
    """Plain legacy LSTM (ryankiros/layer-norm ``lstm_layer``)."""


class LNLSTMCell(LSTMFamilyCell):
    """Layer-norm LSTM (ryankiros/layer-norm ``lnlstm_layer``)."""

    norm_kind = "ln"


class RMSLSTMCell(LSTMFamilyCell):
    """RMSNorm LSTM (bzhangGo/rmsnorm ``rlnlstm_layer``)."""

    norm_kind = "rms"


CELLS: dict[str, type[GRUFamilyCell] | type[LSTMFamilyCell]] = {
    "gru": GRUCell,
    "lngru": LNGRUCell,
    "rlngru": RMSGRUCell,
    "lstm": LSTMCell,
    "lnlstm": LNLSTMCell,
    "rlnlstm": RMSLSTMCell,
}


Cell = GRUFamilyCell | LSTMFamilyCell  # what ``make_cell`` returns: both families share one interface


def make_cell(cell_type: str, input_size: int, hidden_size: int, *, partial_rms: float = 1.0) -> Cell:
    """Instantiate a cell by its legacy name (``gru``, ``lngru``, ...); ``partial_rms`` < 1: pRMSNorm."""
    try:
        cls = CELLS[cell_type]
    except KeyError:
        raise ValueError(
            f"unknown cell type {cell_type!r}; expected one of {', '.join(CELL_TYPES)}"
        ) from None
    return cls(input_size, hidden_size, partial_rms=partial_rms)
