"""The protocols' sentence encoder over a local model (``Engine``); ``http_encoder`` has the server one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..runtime.engine import DEFAULT_BACKEND, Engine
from ..runtime.text import tokenizer_for
from .protocols import Bar, no_bar


class EngineEncoder:
    """``skipthoughts.encode(X, use_eos=eos)`` on a local artifact: the model's tokenizer, its default
    normalisation (skip-thoughts: each of uni and bi L2-normalised, as ``use_norm=True``).

    A line with no tokens (the original ran a zero-step encoder on it) is encoded as ``<eos>`` alone."""

    def __init__(self, engine: Engine, bar: Bar = no_bar, batch_size: int = 128) -> None:
        self.engine, self.bar, self.batch_size = engine, bar, batch_size
        self.tokenize = tokenizer_for(engine.tokenizer_name, pretokenized=False)

    @classmethod
    def open(
        cls, model: Path, *, backend: str = DEFAULT_BACKEND, precision: str = "fp32", bar: Bar = no_bar
    ) -> EngineEncoder:
        return cls(Engine.open(model, backend=backend, precision=precision), bar)

    @property
    def name(self) -> str:
        return self.engine.artifact.name

    def __call__(self, texts: Sequence[str], *, eos: bool | None, what: str = "sentences") -> np.ndarray:
        eos = self.engine.eos_for(eos)
        out = np.zeros((len(texts), self.engine.output_dim), dtype=np.float32)
        empty = [i for i, t in enumerate(texts) if not eos and not self.tokenize(t)]
        rest = sorted(set(range(len(texts))) - set(empty))
        with self.bar(f"encoding {what}", len(texts)) as advance:
            if rest:
                out[rest] = self.engine.encode_sentences(
                    [texts[i] for i in rest], eos=eos, batch_size=self.batch_size, progress=advance
                )
            if empty:
                out[empty] = self.engine.encode_sentences(["" for _ in empty], eos=True)
                advance(len(empty))
        return out
