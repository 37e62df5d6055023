"""Caption x image error matrices exactly as the original ``compute_errors``: lower is better.

``order_violation`` is the reference definition of the order-violation error (spec §7): the retrieval
kernels (``runtime.retrieval``, tuned for speed, their summation order fixed) and the training loss
(``models.losses.error_matrix``, torch for gradients) are tested against it; nothing else restates it.
"""

from __future__ import annotations

import numpy as np

from ...models.methods import METHODS


def order_violation(captions: np.ndarray, images: np.ndarray, *, budget: int = 1 << 22) -> np.ndarray:
    """E[c, i] = sum_k max(0, s_ck - v_ik)^2 (squared, no sqrt), in caption chunks of ~``budget`` floats."""
    s = np.asarray(captions, dtype=np.float32)
    v = np.asarray(images, dtype=np.float32)
    chunk = max(1, budget // max(1, v.shape[0] * v.shape[1]))
    out = np.empty((s.shape[0], v.shape[0]), dtype=np.float32)
    for start in range(0, s.shape[0], chunk):
        diff = np.maximum(s[start : start + chunk, None, :] - v[None, :, :], np.float32(0))
        out[start : start + chunk] = np.einsum("cik,cik->ci", diff, diff)
    return out


def negative_cosine(captions: np.ndarray, images: np.ndarray) -> np.ndarray:
    """E = -s . v for unit vectors (the symmetric models' error)."""
    return -(np.asarray(captions, dtype=np.float32) @ np.asarray(images, dtype=np.float32).T)


def error_matrix(captions: np.ndarray, images: np.ndarray, method: str) -> np.ndarray:
    if method == "order":
        return order_violation(captions, images)
    if method == "cosine":
        return negative_cosine(captions, images)
    raise ValueError(f"unknown scoring method {method!r}; expected one of {', '.join(METHODS)}")
