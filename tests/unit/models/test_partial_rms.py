"""pRMSNorm: p = 1 is the legacy RMSNorm exactly; p < 1 takes the statistic over the first floor(p*d)."""

from __future__ import annotations

import pytest
import torch

from lnserve.models.norms import EPS, LegacyRMSNorm, make_norm, partial_size
from lnserve.models.recurrence import Recurrence


def test_p1_equals_rmsnorm_bit_for_bit() -> None:
    z = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    full, p1 = LegacyRMSNorm(10), LegacyRMSNorm(10, partial=1.0)
    with torch.no_grad():
        full.weight.uniform_(0.5, 1.5)
        p1.weight.copy_(full.weight)
    assert torch.equal(full(z), p1(z))


@pytest.mark.parametrize(("p", "k"), [(0.5, 5), (0.25, 2), (0.0625, 1), (0.99, 9)])
def test_partial_uses_floor_of_p_times_d_features(p: float, k: int) -> None:
    assert partial_size(10, p) == k
    z = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    norm = LegacyRMSNorm(10, partial=p).double()
    expected = z / torch.sqrt((z[:, :k] ** 2).mean(dim=1, keepdim=True) + EPS)
    assert torch.allclose(norm(z), expected, atol=1e-12)
    z2 = z.clone()
    z2[:, k:] *= 100.0  # features past floor(p*d) do not move the statistic
    assert torch.allclose(norm(z2)[:, :k], norm(z)[:, :k], atol=1e-12)


def test_partial_is_refused_for_non_rms_cells_and_bad_fractions() -> None:
    with pytest.raises(ValueError, match="RMSNorm cell"):
        make_norm("ln", 8, partial=0.5)
    with pytest.raises(ValueError, match="RMSNorm cell"):
        Recurrence("lngru", 3, 4, partial_rms=0.5)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        LegacyRMSNorm(8, partial=0.0)
    rnn = Recurrence("rlngru", 3, 4, partial_rms=0.5)
    assert rnn.cell.norm_hh_ru.stat_size == 4 and rnn.cell.norm_hh_c.stat_size == 2
