"""Parameter initialisers of the original recipe (spec §7) and the non-normal recurrent initialisers of
Orhan & Pitkow (ICLR 2020, eminorhan/nonnormal-init).

Everything works on PyTorch's (out, in) layout. A recurrent gate block ``W_hh[k*d:(k+1)*d]`` is the
transpose of the legacy row-vector block U (the recurrence computes h·U = W_hh h), so the chain S, which in
the row-vector convention has ones on the superdiagonal and moves activity from unit j-1 to unit j, appears
here as Sᵀ: ``block[j, j-1] = alpha``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .cells import Cell
    from .encoders import OrderEmbedding

RECURRENT_INITS = ("orthogonal", "identity", "chain", "fbchain")
DEFAULT_GAINS = {"orthogonal": 1.0, "identity": 1.0, "chain": 1.02, "fbchain": 0.04}
FBCHAIN_FORWARD = 0.99  # the chain weight of fbchain; its gain is the feedback weight beta


def shift(n: int) -> torch.Tensor:
    """S of the spec in (out, in) layout: ``S_oi[j, j-1] = 1`` (the row-vector S[i, i+1] = 1, transposed)."""
    return torch.diag(torch.ones(n - 1), -1)


def orthogonal(n: int, generator: torch.Generator) -> torch.Tensor:
    """A random n x n orthogonal matrix: QR of a Gaussian with the sign of R's diagonal folded into Q, as
    the original ``ortho_weight`` (the U of an SVD) draws from the same Haar-uniform distribution."""
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


def recurrent_block(
    kind: str, n: int, *, gain: float | None = None, diag: float = 0.0, generator: torch.Generator
) -> torch.Tensor:
    """One n x n recurrent gate block in (out, in) layout.

    - ``orthogonal``: gain * Q (the original recipe; gain 1).
    - ``identity``: gain * I.
    - ``chain``: diag * I + gain * S, gain = alpha (default 1.02): a feed-forward chain.
    - ``fbchain``: diag * I + 0.99 * S + gain * Sᵀ, gain = beta (default 0.04): the chain plus feedback.
    """
    g = DEFAULT_GAINS[kind] if gain is None else gain
    if kind == "orthogonal":
        return g * orthogonal(n, generator)
    if kind == "identity":
        return g * torch.eye(n)
    if kind == "chain":
        return diag * torch.eye(n) + g * shift(n)
    if kind == "fbchain":
        return diag * torch.eye(n) + FBCHAIN_FORWARD * shift(n) + g * shift(n).T
    raise ValueError(f"unknown recurrent initialiser {kind!r}; expected one of {', '.join(RECURRENT_INITS)}")


def input_matrix(n_out: int, n_in: int, generator: torch.Generator, scale: float = 0.1) -> torch.Tensor:
    """The original ``norm_weight``: uniform(-0.1, 0.1), or orthogonal when square."""
    if n_out == n_in:
        return orthogonal(n_in, generator)
    return (torch.rand(n_out, n_in, generator=generator) * 2.0 - 1.0) * scale


@torch.no_grad()
def init_recurrent_cell(
    cell: Cell,
    *,
    kind: str = "orthogonal",
    gain: float | None = None,
    diag: float = 0.0,
    generator: torch.Generator,
) -> None:
    """Initialise a cell of ``lnserve.models.cells`` block by block: input blocks ``norm_weight``,
    recurrent blocks ``kind`` (random kinds draw each gate block separately; the structured ones repeat the
    same block, as the upstream torch version stacks it for every gate), biases 0, norm gains 1 and norm
    biases 0."""
    d = cell.hidden_size
    n_blocks = cell.weight_hh.shape[0] // d
    for k in range(n_blocks):
        rows = slice(k * d, (k + 1) * d)
        cell.weight_ih[rows] = input_matrix(d, cell.input_size, generator)
        cell.weight_hh[rows] = recurrent_block(kind, d, gain=gain, diag=diag, generator=generator)
    for name, p in cell.named_parameters():
        if name.startswith("norm_"):
            p.fill_(1.0 if name.endswith(".weight") else 0.0)
        elif name in ("bias_ih", "bias"):
            p.zero_()


@torch.no_grad()
def init_order_embedding(
    model: OrderEmbedding,
    *,
    kind: str = "orthogonal",
    gain: float | None = None,
    diag: float = 0.0,
    seed: int = 0,
) -> None:
    """The whole order-embedding model (``lnserve.models.encoders.OrderEmbedding``) from one seed: Wemb
    and the image projection ``norm_weight`` (uniform(-0.1, 0.1)), image bias 0, the sentence cell as
    above."""
    gen = torch.Generator().manual_seed(seed)
    emb = model.sentence.embedding.weight
    emb.copy_(input_matrix(emb.shape[0], emb.shape[1], gen))
    proj = model.image.proj
    proj.weight.copy_(input_matrix(proj.weight.shape[0], proj.weight.shape[1], gen))
    proj.bias.zero_()
    init_recurrent_cell(model.sentence.rnn.cell, kind=kind, gain=gain, diag=diag, generator=gen)
