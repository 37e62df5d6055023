"""The protocols' sentence encoder over a running ``lnserve serve``: batches to ``POST /encode``."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np

from lnserve.errors import UserInputError


class HttpEncoder:
    """``EngineEncoder``'s contract through a server: float32 rows as base64, ``eos`` None = the model's."""

    def __init__(
        self, url: str, model: str | None = None, batch_size: int = 256, timeout: float = 300.0
    ) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout
        self.model, self.batch_size = model, batch_size

    @property
    def name(self) -> str:
        return self.model or "default"

    def __call__(self, texts: Sequence[str], *, eos: bool | None, what: str = "sentences") -> np.ndarray:
        import httpx

        rows: list[np.ndarray] = []
        with httpx.Client(base_url=self.url, timeout=self.timeout) as client:  # no socket outlives a call
            for start in range(0, len(texts), self.batch_size):
                body: dict[str, Any] = {
                    "sentences": list(texts[start : start + self.batch_size]),
                    "eos": eos,
                    "encoding": "base64",
                }
                if self.model is not None:
                    body["model"] = self.model
                resp = client.post("/encode", json=body)
                if resp.status_code != 200:
                    raise UserInputError(f"{self.url}/encode answered {resp.status_code}: {resp.text[:300]}")
                rows += [np.frombuffer(base64.b64decode(v), dtype="<f4") for v in resp.json()["vectors"]]
        return np.stack(rows).astype(np.float32)
