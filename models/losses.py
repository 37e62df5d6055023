"""The order-embedding training objective (spec §7, ivendrov/order-embedding ``model.py``)."""

from __future__ import annotations

import torch

from .methods import METHODS

DEFAULT_MARGINS = {"order": 0.05, "cosine": 0.2}


def error_matrix(s: torch.Tensor, v: torch.Tensor, method: str) -> torch.Tensor:
    """E[i, j] = E(s_i, v_j), lower is better: sum_k max(0, s_k - v_k)^2 (order) or -s.v (cosine)."""
    if method == "order":
        return torch.clamp(s[:, None, :] - v[None, :, :], min=0).pow(2).sum(dim=-1)  # (N, M)
    if method == "cosine":
        return -(s @ v.t())
    raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")


def contrastive_loss(s: torch.Tensor, v: torch.Tensor, *, method: str, margin: float) -> torch.Tensor:
    """Hinge over all in-batch negatives, both directions, summed (not averaged):

    L = sum_{i != j} [max(0, m - E[i,j] + E[j,j]) + max(0, m - E[i,j] + E[i,i])]

    s (N, dim) caption embeddings, v (N, dim) image embeddings; row i of each is an aligned pair.
    """
    errs = error_matrix(s, v, method)
    diag = errs.diagonal()
    off = ~torch.eye(errs.shape[0], dtype=torch.bool, device=errs.device)
    wrong_caption = torch.clamp(margin - errs + diag[None, :], min=0)  # caption i vs image j's own caption
    wrong_image = torch.clamp(margin - errs + diag[:, None], min=0)  # image j vs caption i's own image
    return (wrong_caption + wrong_image)[off].sum()


@torch.no_grad()
def clip_each_gradient(params: list[torch.Tensor] | tuple[torch.Tensor, ...], max_norm: float) -> None:
    """Rescale every gradient separately to norm ``max_norm`` when its own norm exceeds it (spec §7:
    "each gradient is rescaled separately"), unlike torch's global ``clip_grad_norm_``."""
    for p in params:
        if p.grad is None:
            continue
        norm = p.grad.norm()
        if norm > max_norm:
            p.grad.mul_(max_norm / norm)
