"""The recurrent initialisers' defining structure (spec §7), in PyTorch's (out, in) layout."""

from __future__ import annotations

import pytest
import torch

from lnserve.models.cells import make_cell
from lnserve.models.init import init_recurrent_cell, recurrent_block, shift

D = 6


def _blocks(cell: torch.nn.Module) -> list[torch.Tensor]:
    d = cell.hidden_size
    return [cell.weight_hh[k * d : (k + 1) * d].detach() for k in range(cell.weight_hh.shape[0] // d)]


@pytest.mark.parametrize("cell_type", ["gru", "lngru", "rlngru"])
def test_orthogonal_is_orthogonal_per_gate_block(cell_type: str) -> None:
    cell = make_cell(cell_type, 4, D)
    init_recurrent_cell(cell, kind="orthogonal", generator=torch.Generator().manual_seed(0))
    blocks = _blocks(cell)
    assert len(blocks) == 3  # r, u, candidate
    for u in blocks:
        assert torch.allclose(u.T @ u, torch.eye(D), atol=1e-6)
    assert not torch.allclose(blocks[0], blocks[1])  # each block drawn separately


def test_identity_block_is_gain_times_identity() -> None:
    gen = torch.Generator()
    assert torch.equal(recurrent_block("identity", D, generator=gen), torch.eye(D))
    assert torch.equal(recurrent_block("identity", D, gain=0.5, generator=gen), 0.5 * torch.eye(D))


def test_chain_moves_activity_one_unit_forward() -> None:
    """Row-vector U = a I + alpha S (S[i, i+1] = 1); in (out, in) layout block[j, j-1] = alpha."""
    block = recurrent_block("chain", D, diag=0.1, generator=torch.Generator())  # default alpha 1.02
    u_row = block.T  # back to the legacy h @ U convention
    expected = torch.zeros(D, D)
    for i in range(D):
        expected[i, i] = 0.1
        if i + 1 < D:
            expected[i, i + 1] = 1.02
    assert torch.allclose(u_row, expected)
    h = torch.zeros(D)
    h[2] = 1.0
    assert torch.allclose(h @ u_row, torch.tensor([0, 0, 0.1, 1.02, 0, 0]))  # unit 2 -> unit 3


def test_fbchain_has_forward_chain_and_weak_feedback() -> None:
    beta = 0.07
    u_row = recurrent_block("fbchain", D, gain=beta, generator=torch.Generator()).T
    s = shift(D).T  # the spec's S, superdiagonal ones
    assert torch.allclose(u_row, 0.99 * s + beta * s.T)
    assert torch.allclose(u_row.diagonal(1), torch.full((D - 1,), 0.99))
    assert torch.allclose(u_row.diagonal(-1), torch.full((D - 1,), beta))
    assert u_row.diagonal().abs().max() == 0


@pytest.mark.parametrize("kind", ["identity", "chain", "fbchain"])
def test_structured_inits_repeat_the_block_for_every_gate(kind: str) -> None:
    cell = make_cell("lngru", 4, D)
    init_recurrent_cell(cell, kind=kind, generator=torch.Generator().manual_seed(0))
    blocks = _blocks(cell)
    assert all(torch.equal(b, blocks[0]) for b in blocks)
    assert torch.equal(blocks[0], recurrent_block(kind, D, generator=torch.Generator()))
    assert torch.equal(cell.bias_ih.detach(), torch.zeros(3 * D))
    assert torch.equal(cell.norm_hh_ru.weight.detach(), torch.ones(2 * D))
    assert torch.equal(cell.norm_hh_ru.bias.detach(), torch.zeros(2 * D))


def test_input_blocks_are_uniform_or_orthogonal_when_square() -> None:
    cell = make_cell("gru", 4, D)
    init_recurrent_cell(cell, generator=torch.Generator().manual_seed(0))
    assert cell.weight_ih.abs().max() <= 0.1
    square = make_cell("gru", D, D)
    init_recurrent_cell(square, generator=torch.Generator().manual_seed(0))
    for k in range(3):
        w = square.weight_ih[k * D : (k + 1) * D].detach()
        assert torch.allclose(w.T @ w, torch.eye(D), atol=1e-6)
