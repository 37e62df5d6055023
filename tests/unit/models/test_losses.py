"""The training loss against a direct double loop over spec §7's formula; per-gradient clipping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lnserve.app.runtime.scoring import order_violation
from lnserve.models.losses import clip_each_gradient, contrastive_loss, error_matrix
from lnserve.models.norms import l2normalize


def _direct(s: torch.Tensor, v: torch.Tensor, method: str, m: float) -> float:
    def err(a: torch.Tensor, b: torch.Tensor) -> float:
        if method == "order":
            return float(sum(max(0.0, float(a[k] - b[k])) ** 2 for k in range(a.shape[0])))
        return -float(a @ b)

    n = s.shape[0]
    e = [[err(s[i], v[j]) for j in range(n)] for i in range(n)]
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                total += max(0.0, m - e[i][j] + e[j][j]) + max(0.0, m - e[i][j] + e[i][i])
    return total


@pytest.mark.parametrize(("method", "margin"), [("order", 0.05), ("cosine", 0.2)])
def test_loss_matches_the_formula(method: str, margin: float) -> None:
    gen = torch.Generator().manual_seed(0)
    s = l2normalize(torch.randn(5, 4, generator=gen, dtype=torch.float64))
    v = l2normalize(torch.randn(5, 4, generator=gen, dtype=torch.float64))
    if method == "order":
        s, v = s.abs(), v.abs()
    got = contrastive_loss(s, v, method=method, margin=margin).item()
    assert got == pytest.approx(_direct(s, v, method, margin), rel=1e-12)
    assert got > 0


def test_training_error_matrix_is_the_reference_order_violation() -> None:
    """One definition: the loss's torch error matrix equals the runtime's reference formula."""
    gen = torch.Generator().manual_seed(1)
    s = torch.rand(7, 16, generator=gen)
    v = torch.rand(9, 16, generator=gen)
    want = order_violation(s.numpy(), v.numpy())
    np.testing.assert_allclose(error_matrix(s, v, "order").numpy(), want, rtol=0, atol=1e-6)


def test_order_error_is_squared_violation_of_caption_over_image() -> None:
    s = torch.tensor([[0.5, 0.1]])
    v = torch.tensor([[0.2, 0.3], [0.6, 0.2]])
    assert torch.allclose(error_matrix(s, v, "order"), torch.tensor([[0.09, 0.0]]))


def test_each_gradient_is_clipped_separately() -> None:
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([0.6, 0.8])
    clip_each_gradient([a, b], 2.0)
    assert torch.allclose(a.grad, torch.tensor([1.2, 1.6]))  # norm 5 -> 2
    assert torch.allclose(b.grad, torch.tensor([0.6, 0.8]))  # norm 1: untouched (a global clip would scale)
