"""Sentence and image encoders of order-embeddings and skip-thoughts.

Token handling (tokenisation, vocabulary lookup, ``<eos>``) happens before these modules: they take ids
or word vectors in a right-padded, time-major batch plus each row's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .norms import l2normalize
from .recurrence import Recurrence, reverse_padded


@dataclass(frozen=True)
class OrderEmbeddingConfig:
    """Dimensions and options of an order-embedding model (legacy option names)."""

    cell: str
    n_words: int
    dim_word: int
    dim: int
    dim_image: int
    use_abs: bool
    partial_rms: float = 1.0  # pRMSNorm fraction (RMS cells only); 1 = the legacy RMSNorm


class OrderSentenceEncoder(nn.Module):
    """ids -> Wemb rows -> recurrence from a zero state -> last state -> l2norm -> abs (if so configured)."""

    def __init__(self, cfg: OrderEmbeddingConfig) -> None:
        super().__init__()
        self.use_abs = cfg.use_abs
        self.embedding = nn.Embedding(cfg.n_words, cfg.dim_word)
        self.rnn = Recurrence(cfg.cell, cfg.dim_word, cfg.dim, partial_rms=cfg.partial_rms)

    def hidden(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ids (T, B) int64 including the appended eos, lengths (B,) -> raw last state (B, d)."""
        return self.rnn.last_state(self.embedding(ids), lengths)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        emb = l2normalize(self.hidden(ids, lengths))
        return emb.abs() if self.use_abs else emb


class OrderImageEncoder(nn.Module):
    """CNN feature -> linear -> l2norm -> abs (if the model says so)."""

    def __init__(self, cfg: OrderEmbeddingConfig) -> None:
        super().__init__()
        self.use_abs = cfg.use_abs
        self.proj = nn.Linear(cfg.dim_image, cfg.dim)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        emb = l2normalize(self.proj(features))
        return emb.abs() if self.use_abs else emb


class OrderEmbedding(nn.Module):
    """Both halves of an order-embedding checkpoint, so one state dict holds the whole model."""

    def __init__(self, cfg: OrderEmbeddingConfig) -> None:
        super().__init__()
        self.config = cfg
        self.sentence = OrderSentenceEncoder(cfg)
        self.image = OrderImageEncoder(cfg)


@dataclass(frozen=True)
class SkipThoughtsConfig:
    """Which halves exist and their sizes; ``None`` means that half is absent."""

    dim_word: int
    uni_cell: str | None = None
    uni_dim: int | None = None
    bi_cell: str | None = None
    bi_dim: int | None = None  # per direction

    @property
    def output_dim(self) -> int:
        return (self.uni_dim or 0) + 2 * (self.bi_dim or 0)


def _half(cell: str | None, dim_word: int, dim: int | None) -> Recurrence | None:
    """One recurrence of skip-thoughts, or None for an absent half (a cell needs its size)."""
    if cell is None:
        return None
    if dim is None:
        raise ValueError(f"skip-thoughts half with cell {cell!r} has no size")
    return Recurrence(cell, dim_word, dim)


class SkipThoughts(nn.Module):
    """uni-skip, bi-skip or combine-skip ([uni | bi]) over word vectors looked up in the tables."""

    def __init__(self, cfg: SkipThoughtsConfig) -> None:
        super().__init__()
        self.config = cfg
        self.uni = _half(cfg.uni_cell, cfg.dim_word, cfg.uni_dim)
        self.bi_fwd = _half(cfg.bi_cell, cfg.dim_word, cfg.bi_dim)
        self.bi_bwd = _half(cfg.bi_cell, cfg.dim_word, cfg.bi_dim)

    def forward(
        self,
        uni_x: torch.Tensor | None,
        bi_x: torch.Tensor | None,
        lengths: torch.Tensor,
        *,
        normalize: bool = True,
    ) -> torch.Tensor:
        """uni_x / bi_x (T, B, dim_word) from utable / btable, lengths (B,) -> (B, output_dim).

        Uni and bi are normalised separately (bi over both directions jointly) and not renormalised
        after concatenation, so a combine-skip vector has norm sqrt(2).
        """
        parts: list[torch.Tensor] = []
        if self.uni is not None:
            assert uni_x is not None
            uni = self.uni.last_state(uni_x, lengths)
            parts.append(l2normalize(uni) if normalize else uni)
        if self.bi_fwd is not None and self.bi_bwd is not None:
            assert bi_x is not None
            fwd = self.bi_fwd.last_state(bi_x, lengths)
            bwd = self.bi_bwd.last_state(reverse_padded(bi_x, lengths), lengths)
            bi = torch.cat([fwd, bwd], dim=-1)
            parts.append(l2normalize(bi) if normalize else bi)
        return torch.cat(parts, dim=-1)
