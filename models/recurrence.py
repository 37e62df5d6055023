"""The time loop: hoisted input projection, per-step recurrence, exact mask carry."""

from __future__ import annotations

import torch
from torch import nn

from .cells import State, make_cell


def length_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(T, B) bool mask, True on each row's first ``lengths[b]`` steps (right padding)."""
    return torch.arange(steps, device=lengths.device)[:, None] < lengths[None, :]


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's valid steps in place of a right-padded (T, B, F) batch; padding stays at the end.

    Equivalent to the original's reversal of the whole padded sequence plus mask: leading masked steps
    keep the zero state, so only the order of the valid steps matters.
    """
    steps = x.shape[0]
    t = torch.arange(steps, device=x.device)[:, None]  # (T, 1)
    src = torch.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # (T, B)
    return torch.gather(x, 0, src[:, :, None].expand_as(x))


class Recurrence(nn.Module):
    """Runs a cell over a right-padded time-major batch and returns every state."""

    def __init__(
        self, cell_type: str, input_size: int, hidden_size: int, *, partial_rms: float = 1.0
    ) -> None:
        super().__init__()
        self.cell_type = cell_type
        self.cell = make_cell(cell_type, input_size, hidden_size, partial_rms=partial_rms)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> list[State]:
        """x (T, B, n_in), mask (T, B) bool -> the state after each step (T entries).

        Masked steps still run the cell (as the original did), then carry the previous state unchanged:
        ``where`` makes the carry bit-exact.
        """
        steps, batch = x.shape[0], x.shape[1]
        x_proj = self.cell.project_inputs(x)  # (T, B, k) tensors, all steps in one GEMM
        state = self.cell.initial_state(batch, x)
        states: list[State] = []
        for t in range(steps):
            new = self.cell.step(tuple(p[t] for p in x_proj), state)
            keep = mask[t][:, None]
            state = tuple(torch.where(keep, n, o) for n, o in zip(new, state, strict=True))
            states.append(state)
        return states

    def last_state(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(T, B, n_in), lengths (B,) -> hidden state after each row's last valid step, (B, d)."""
        states = self.forward(x, length_mask(lengths, x.shape[0]))
        return states[-1][0]
