"""Every cell: padding never changes a vector; the plain cells match torch's own GRU / LSTM as controls;
GEMM weights in bfloat16 keep the state float32 and the vectors near fp32's."""

from __future__ import annotations

import copy

import pytest
import torch

from lnserve.models.cells import CELL_TYPES, gemm
from lnserve.models.recurrence import Recurrence, length_mask

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


def test_fp32_gemm_is_the_plain_matmul() -> None:
    """The cast around each GEMM returns its input unchanged in float32: fp32 results stay bit-identical."""
    gen = torch.Generator().manual_seed(6)
    x, w = torch.randn(4, 3, N_IN, generator=gen), torch.randn(3 * D, N_IN, generator=gen)
    assert x.to(w.dtype) is x
    assert torch.equal(gemm(x, w), torch.matmul(x, w.t()))
    assert gemm(x, w.bfloat16()).dtype == torch.bfloat16  # the caller takes its slices back to float32


def _bf16_gemms(rnn: Recurrence) -> Recurrence:
    """A copy whose cell holds its two GEMM weights in bfloat16, as the torch backend's bf16 does."""
    out = copy.deepcopy(rnn)
    for name in ("weight_ih", "weight_hh"):
        setattr(out.cell, name, torch.nn.Parameter(getattr(out.cell, name).detach().bfloat16()))
    return out


@pytest.mark.parametrize("cell", CELL_TYPES)
def test_bf16_gemms_track_fp32_and_keep_the_state_float32(cell: str) -> None:
    """bf16 GEMM weights at a realistic width: every state stays float32, each final vector's cosine to fp32
    is >= 0.999, and padding / batch size move a vector by <= 1e-2 (bf16 runs anywhere, emulated where the
    CPU lacks bf16 instructions, so this holds on every machine)."""
    n_in, d, lengths = 48, 192, (9, 1, 5, 9, 3)
    rnn = Recurrence(cell, n_in, d)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():  # weights at the scale trained models have: unit-variance pre-activations
        for name, p in rnn.named_parameters():
            if name.endswith(("weight_ih", "weight_hh")):
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)
            elif ".norm_" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.5 * (torch.rand(p.shape, generator=gen) - 0.5))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    rnn16 = _bf16_gemms(rnn.eval())
    x = torch.randn(max(lengths), len(lengths), n_in, generator=gen)
    lens = torch.tensor(lengths)
    with torch.inference_mode():
        states = rnn16(x, length_mask(lens, x.shape[0]))
        assert all(s.dtype == torch.float32 for state in states for s in state)
        h32, h16 = rnn.last_state(x, lens), rnn16.last_state(x, lens)
        cos = torch.nn.functional.cosine_similarity(h32, h16, dim=-1)
        assert cos.min().item() >= 0.999, (cell, cos.min().item())
        for b, n in enumerate(lengths):
            alone = rnn16.last_state(x[:n, b : b + 1], torch.tensor([n]))
            assert (h16[b] - alone[0]).abs().max().item() <= 1e-2, (cell, b)
