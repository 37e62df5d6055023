"""Normalisations with the legacy epsilon placement (1e-5 inside the square root, population variance)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

EPS = 1e-5


class LegacyLayerNorm(nn.Module):
    """LN(z) = gain * (z - mean) / sqrt(var + 1e-5) + bias, over the last axis (Ba et al. / Kiros)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, (z.shape[-1],), self.weight, self.bias, eps=EPS)


class LegacyRMSNorm(nn.Module):
    """RMS(z) = gain * z / sqrt(mean(z^2) + 1e-5): no bias, eps set explicitly (torch's default differs)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(z, (z.shape[-1],), self.weight, eps=EPS)


def make_norm(kind: str | None, size: int) -> nn.Module:
    """Build the norm a cell type asks for: 'ln', 'rms' or None (identity)."""
    if kind == "ln":
        return LegacyLayerNorm(size)
    if kind == "rms":
        return LegacyRMSNorm(size)
    return nn.Identity()


def l2normalize(x: torch.Tensor) -> torch.Tensor:
    """Row-wise x / ||x|| with no epsilon, as the original (a zero row gives NaN, like Theano did)."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True))
