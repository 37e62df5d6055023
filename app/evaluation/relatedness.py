"""SICK relatedness as ``eval_sick.py`` trained it: the Tree-LSTM 5-class label encoding and a softmax
regression (Keras ``Dense`` + softmax, categorical cross-entropy, Adam) fitted 100 epochs at a time until
the trial set's Pearson r stops rising."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import DegenerateSplit

CLASSES = 5
RATINGS = np.arange(1, CLASSES + 1, dtype=np.float64)


def encode_labels(scores: np.ndarray, nclass: int = CLASSES) -> np.ndarray:
    """Tai, Socher & Manning (2015): score y -> mass ``y - floor(y)`` on class floor(y)+1 and
    ``floor(y) - y + 1`` on class floor(y) (1-based), so the expected class is y."""
    y = np.zeros((len(scores), nclass), dtype=np.float32)
    for j, s in enumerate(scores):
        f = np.floor(s)
        for i in range(nclass):
            if i + 1 == f + 1:
                y[j, i] = s - f
            if i + 1 == f:
                y[j, i] = f - s + 1
    return y


def expected_score(proba: np.ndarray) -> np.ndarray:
    return proba @ RATINGS


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r of the model's scores ``a`` with the gold ``b`` (which the reader checked: not constant).
    Raises DegenerateSplit when the model scores every pair alike: r is undefined, never a NaN result."""
    from scipy.stats import pearsonr

    require_varying(a, "scores")
    return float(pearsonr(a, b)[0])


def require_varying(scores: np.ndarray, what: str) -> None:
    """A correlation needs ``scores`` that vary: the model gives every pair the same one when, for example,
    all the sentences are made of words it does not know."""
    if len(scores) > 0 and np.ptp(scores) == 0:
        raise DegenerateSplit(
            f"the model gives all {len(scores)} pairs the same {what} ({float(scores[0]):g}): the "
            "correlation is undefined (are the sentences all alike, or all unknown words to the model?)"
        )


def train_softmax(
    x: np.ndarray,
    y: np.ndarray,
    dev_x: np.ndarray,
    dev_scores: np.ndarray,
    *,
    seed: int,
    epochs_per_check: int = 100,
    batch_size: int = 128,
    max_rounds: int = 50,
    on_round: Callable[[int, float], None] | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """``train_model``: fit ``epochs_per_check`` epochs (no shuffling), score the trial set, keep the best
    weights; stop at the first round that does not beat the best. Returns ``predict_proba`` of the best."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    d = x.shape[1]
    limit = float(np.sqrt(6.0 / (d + CLASSES)))  # Keras glorot_uniform, zero bias
    lin = torch.nn.Linear(d, CLASSES, dtype=torch.float32)
    with torch.no_grad():
        lin.weight.copy_((torch.rand(CLASSES, d, generator=gen) * 2 - 1) * limit)
        lin.bias.zero_()
    opt = torch.optim.Adam(lin.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
    dev_t = torch.as_tensor(dev_x, dtype=torch.float32)

    def proba(m: torch.nn.Linear, inp: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.softmax(m(inp), dim=1)

    best, best_state = -1.0, None
    for round_no in range(1, max_rounds + 1):
        for _ in range(epochs_per_check):
            for start in range(0, len(xt), batch_size):
                p = torch.softmax(lin(xt[start : start + batch_size]), dim=1).clamp(1e-7, 1 - 1e-7)
                loss = -(yt[start : start + batch_size] * torch.log(p)).sum(1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        score = pearson(expected_score(proba(lin, dev_t).double().numpy()), dev_scores)
        if on_round is not None:
            on_round(round_no, score)
        if score > best:
            best, best_state = score, {k: v.clone() for k, v in lin.state_dict().items()}
        else:
            break
    final = torch.nn.Linear(d, CLASSES)
    assert best_state is not None  # round 1 always beats -1
    final.load_state_dict(best_state)
    return lambda inp: proba(final, torch.as_tensor(inp, dtype=torch.float32)).double().numpy()
