"""Normalisations with the legacy epsilon placement (1e-5 inside the square root, population variance)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .cell_types import NORM_EPS as EPS


class LegacyLayerNorm(nn.Module):
    """LN(z) = gain * (z - mean) / sqrt(var + 1e-5) + bias, over the last axis (Ba et al. / Kiros)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, (z.shape[-1],), self.weight, self.bias, eps=EPS)


def partial_size(size: int, partial: float) -> int:
    """Features that feed the pRMSNorm statistic: floor(p * d), as ``int(d * p)`` in bzhangGo/rmsnorm's
    ``rmsnorm_torch.py`` (spec §4.8); at least one, so a tiny p still has a statistic."""
    if not 0.0 < partial <= 1.0:
        raise ValueError(f"partial RMSNorm fraction must be in (0, 1], got {partial}")
    return max(1, int(size * partial))


class LegacyRMSNorm(nn.Module):
    """RMS(z) = gain * z / sqrt(mean(z^2) + 1e-5): no bias, eps set explicitly (torch's default differs).

    ``partial`` < 1 is pRMSNorm (Zhang & Sennrich 2019): the mean square is taken over the first
    floor(p * d) features only, and the whole vector is rescaled by it. p = 1 is the exact legacy norm.
    """

    def __init__(self, size: int, *, partial: float = 1.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.partial = partial
        self.stat_size = partial_size(size, partial)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.stat_size == z.shape[-1]:
            return F.rms_norm(z, (z.shape[-1],), self.weight, eps=EPS)
        head = z[..., : self.stat_size]
        return self.weight * z * torch.rsqrt((head * head).mean(dim=-1, keepdim=True) + EPS)


def make_norm(kind: str | None, size: int, *, partial: float = 1.0) -> nn.Module:
    """Build the norm a cell type asks for: 'ln', 'rms' or None (identity); ``partial`` is RMS-only."""
    if partial != 1.0 and kind != "rms":
        raise ValueError(f"partial RMSNorm (p={partial}) needs an RMSNorm cell, not norm kind {kind!r}")
    if kind == "ln":
        return LegacyLayerNorm(size)
    if kind == "rms":
        return LegacyRMSNorm(size, partial=partial)
    return nn.Identity()


def l2normalize(x: torch.Tensor) -> torch.Tensor:
    """Row-wise x / ||x|| with no epsilon, as the original (a zero row gives NaN, like Theano did)."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True))
