"""Logistic regression as the original scripts fitted it, and a batched torch solver for the fast mode.

Faithful: scikit-learn's liblinear (L2, intercept with ``intercept_scaling=1`` so the intercept is
regularised too, tol 1e-4), one-vs-rest for several classes: ``LogisticRegression(C=c)`` of scikit-learn
0.1x. Fast: the same objective for many (train rows, C) problems at once, one L-BFGS run in torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import DegenerateSplit


def _require_sklearn() -> None:
    from lnserve.extras import require

    require("sklearn", "eval", "the faithful protocols (scikit-learn's liblinear)")


def liblinear(c: float):
    """``LogisticRegression(C=c)`` with scikit-learn 0.1x defaults; one-vs-rest for several classes."""
    _require_sklearn()
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, solver="liblinear", tol=1e-4, max_iter=100)  # L2 is the default


def fit_liblinear(x: np.ndarray, y: np.ndarray, c: float):
    """Fit as the scripts did. liblinear stopping at ``max_iter`` (as it could then) is not an error here:
    its ConvergenceWarning would print once per fit, hundreds of times per task."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    classes = np.unique(y)
    _require_two_classes(classes, len(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if len(classes) > 2:
            from sklearn.multiclass import OneVsRestClassifier

            return OneVsRestClassifier(liblinear(c)).fit(x, y)
        return liblinear(c).fit(x, y)


def _require_two_classes(classes: np.ndarray, n: int) -> None:
    """A training split of one class (a fold of a set with few items of that class) cannot be fitted:
    ``DegenerateSplit``, in both modes (liblinear's own ValueError would be an internal error)."""
    if len(classes) < 2:
        raise DegenerateSplit(
            f"a training split of {n} items holds one class only; the set needs more items of each class"
        )


@dataclass(frozen=True)
class Problem:
    """One logistic regression to fit: its training rows (indices into the shared X) and C."""

    train: np.ndarray
    c: float


def fit_batched(
    x: np.ndarray,
    y: np.ndarray,
    problems: Sequence[Problem],
    classes: np.ndarray,
    *,
    max_iter: int = 200,
    device: str | None = None,
) -> np.ndarray:
    """Weights ``(P, K, d+1)`` minimising each problem's liblinear objective (one-vs-rest per class, K = 1
    for two classes), all problems in one L-BFGS run: each objective is scaled by ``1/(C n)`` so that one
    line search suits them all; the minimisers are unchanged because the problems are separable."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    xs = torch.as_tensor(np.c_[x, np.ones(len(x))], dtype=torch.float32, device=device)
    k = 1 if len(classes) == 2 else len(classes)
    target = classes[1:] if k == 1 else classes
    sign = torch.as_tensor(
        np.where(y[:, None] == target[None, :], 1.0, -1.0), dtype=torch.float32, device=device
    )
    weight = np.zeros((len(x), len(problems)), dtype=np.float32)
    lam = np.zeros(len(problems), dtype=np.float32)
    for p, prob in enumerate(problems):
        _require_two_classes(np.unique(y[prob.train]), len(prob.train))
        weight[prob.train, p] = 1.0 / len(prob.train)
        lam[p] = 1.0 / (prob.c * len(prob.train))
    w_rows = torch.as_tensor(np.repeat(weight, k, axis=1), device=device)  # (n, P*K)
    lam_t = torch.as_tensor(np.repeat(lam, k), device=device)
    sign_all = sign.repeat(1, len(problems))  # (n, P*K), class-major within each problem
    params = torch.zeros(xs.shape[1], len(problems) * k, device=device, requires_grad=True)
    opt = torch.optim.LBFGS(
        [params],
        max_iter=max_iter,
        tolerance_grad=1e-6,
        tolerance_change=1e-10,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        z = xs @ params
        loss = (w_rows * torch.nn.functional.softplus(-sign_all * z)).sum() + 0.5 * (
            lam_t * (params**2).sum(0)
        ).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return params.detach().T.reshape(len(problems), k, -1).cpu().numpy()


def predict_batched(weights: np.ndarray, x: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Predicted labels ``(len(x),)`` from one problem's weights ``(K, d+1)``."""
    z = np.c_[x, np.ones(len(x))] @ weights.T
    if weights.shape[0] == 1:
        return classes[(z[:, 0] > 0).astype(int)]
    return classes[np.argmax(z, axis=1)]
