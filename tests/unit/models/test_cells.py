"""Every cell: padding never changes a vector; the plain cells match torch's own GRU / LSTM as controls."""

from __future__ import annotations

import pytest
import torch

from lnserve.models.cells import CELL_TYPES
from lnserve.models.recurrence import Recurrence

N_IN, D = 5, 7
LENGTHS = (6, 1, 4, 3, 6, 2)


def _random_recurrence(cell: str, seed: int = 0) -> Recurrence:
    """Random weights everywhere, norm gains/biases away from 1/0 so a misplaced norm shows."""
    rnn = Recurrence(cell, N_IN, D)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in rnn.named_parameters():
            noise = torch.rand(p.shape, generator=gen) - 0.5
            is_gain = ".norm_" in name and name.endswith(".weight")
            p.copy_(1.0 + 0.5 * noise if is_gain else noise)
    return rnn.eval()


@pytest.mark.parametrize("cell", CELL_TYPES)
def test_padded_batch_equals_one_by_one(cell: str) -> None:
    rnn = _random_recurrence(cell)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(max(LENGTHS), len(LENGTHS), N_IN, generator=gen)  # (T, B, n_in), garbage in padding
    lengths = torch.tensor(LENGTHS)
    with torch.no_grad():
        batch = rnn.last_state(x, lengths)
        for b, n in enumerate(LENGTHS):
            alone = rnn.last_state(x[:n, b : b + 1], torch.tensor([n]))
            assert (batch[b] - alone[0]).abs().max().item() <= 1e-6, (cell, b)


def test_gru_matches_torch_gru() -> None:
    """Spec §4.1: weight_ih = [W^T; Wx^T], weight_hh = [U^T; Ux^T], bias_ih = [b; bx], bias_hh = 0."""
    ours = _random_recurrence("gru", seed=2)
    ref = torch.nn.GRU(N_IN, D)
    cell = ours.cell
    with torch.no_grad():
        ref.weight_ih_l0.copy_(cell.weight_ih)  # rows r | u | candidate == torch's r | z | n
        ref.weight_hh_l0.copy_(cell.weight_hh)
        ref.bias_ih_l0.copy_(cell.bias_ih)
        ref.bias_hh_l0.zero_()
        x = torch.randn(6, 3, N_IN, generator=torch.Generator().manual_seed(3))
        out, _ = ref(x)
        states = ours(x, torch.ones(6, 3, dtype=torch.bool))
    ours_all = torch.stack([s[0] for s in states])
    assert (ours_all - out).abs().max().item() <= 1e-5


def test_lstm_matches_torch_lstm() -> None:
    """Spec §4.4: torch gates i, f, g, o = Theano blocks [0, 1, 3, 2]; b in both torch biases (sum 2b)."""
    ours = _random_recurrence("lstm", seed=4)
    ref = torch.nn.LSTM(N_IN, D)
    cell = ours.cell

    def reorder(t: torch.Tensor) -> torch.Tensor:
        i, f, o, g = t.split(D, dim=0)
        return torch.cat([i, f, g, o], dim=0)

    with torch.no_grad():
        ref.weight_ih_l0.copy_(reorder(cell.weight_ih))
        ref.weight_hh_l0.copy_(reorder(cell.weight_hh))
        ref.bias_ih_l0.copy_(reorder(cell.bias))
        ref.bias_hh_l0.copy_(reorder(cell.bias))
        x = torch.randn(6, 3, N_IN, generator=torch.Generator().manual_seed(5))
        out, (_, c_n) = ref(x)
        states = ours(x, torch.ones(6, 3, dtype=torch.bool))
    assert (torch.stack([s[0] for s in states]) - out).abs().max().item() <= 1e-5
    assert (states[-1][1] - c_n[0]).abs().max().item() <= 1e-5
