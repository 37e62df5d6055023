"""SentEval (facebookresearch/SentEval) callbacks over an lnserve model: ``prepare`` opens a local
artifact (``params['lnserve_model']``) or a running server (``params['lnserve_url']``, optionally
``params['lnserve_name']`` for a model other than its default); ``batcher`` encodes SentEval's token lists.

``params['lnserve_eos']`` (default: the model's own default) and ``params['lnserve_backend']`` (local only)
are optional. SentEval's own ``examples/skipthought.py`` encodes with ``use_eos=True``.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ENCODER_KEY = "lnserve_encoder"


def prepare(params: MutableMapping[str, Any], samples: Sequence[Sequence[str]]) -> None:
    """Open the encoder once; SentEval calls this per task with all its sentences (unused here)."""
    if params.get(ENCODER_KEY) is not None:
        return
    model, url = params.get("lnserve_model"), params.get("lnserve_url")
    if (model is None) == (url is None):
        raise ValueError(
            "set exactly one of params['lnserve_model'] (an artifact directory) and "
            "params['lnserve_url'] (a running lnserve server, e.g. http://127.0.0.1:8000)"
        )
    if url is not None:
        from .http_encoder import HttpEncoder

        params[ENCODER_KEY] = HttpEncoder(str(url), params.get("lnserve_name"))
    else:
        from ..runtime.engine import DEFAULT_BACKEND
        from .encoders import EngineEncoder

        assert model is not None  # exactly one of the two (checked above)
        params[ENCODER_KEY] = EngineEncoder.open(
            Path(model), backend=params.get("lnserve_backend", DEFAULT_BACKEND)
        )


def batcher(params: MutableMapping[str, Any], batch: Sequence[Sequence[str]]) -> np.ndarray:
    """One row per sentence; SentEval hands tokens, joined with spaces as its skip-thoughts example does
    (an empty sentence becomes '.')."""
    if params.get(ENCODER_KEY) is None:
        prepare(params, [])
    sentences = [" ".join(tokens) if len(tokens) else "." for tokens in batch]
    return params[ENCODER_KEY](sentences, eos=params.get("lnserve_eos"), what="SentEval batch")
