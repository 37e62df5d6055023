"""One function per task: read the files, encode, fit and score exactly as the original script did.

``Context.fast`` swaps the expensive steps for a first look (see ``fast_*``): the folds and the data stay
the same, C is picked on one inner split instead of ten, and every (fold, C) fit of a stage runs at once
in torch. Accuracies are in %, correlations raw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from . import datasets as ds
from .errors import DegenerateSplit, EvalDataError, TooFewItems
from .folds import (
    C_GRID,
    best_index,
    kfold,
    shuffled_order,
)
from .linear import Problem, fit_batched, fit_liblinear, predict_batched

TASKS = ("sick-r", "sick-e", "mr", "cr", "subj", "mpqa", "trec", "msrp", "sts14")
K = 10
SENTEVAL_C = tuple(2.0**t for t in range(-2, 4))  # SplitClassifier's scikit-learn grid


class Encoder(Protocol):
    """Sentences -> vectors, as ``skipthoughts.encode(X, use_eos=eos)`` (tokenised by the model)."""

    def __call__(self, texts: Sequence[str], *, eos: bool, what: str) -> np.ndarray: ...


Bar = Callable[[str, int | None], AbstractContextManager[Callable[[int], None]]]


@contextmanager
def no_bar(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    yield lambda n: None


@dataclass
class Context:
    encode: Encoder
    data: Path
    seed: int = 1234
    fast: bool = False
    bar: Bar = field(default=no_bar)
    jobs: int = 1  # threads for independent liblinear fits (faithful mode)


def run_task(task: str, ctx: Context) -> dict[str, Any]:
    runners: dict[str, Callable[[Context], dict[str, Any]]] = {
        "mr": lambda c: binary(c, "mr"),
        "cr": lambda c: binary(c, "cr"),
        "subj": lambda c: binary(c, "subj"),
        "mpqa": lambda c: binary(c, "mpqa"),
        "trec": trec,
        "msrp": msrp,
        "sick-r": sick_r,
        "sick-e": sick_e,
        "sts14": sts14,
    }
    try:
        return runners[task](ctx)
    except TooFewItems as exc:
        raise EvalDataError(f"task {task}: the files in {ctx.data} are too small: {exc}") from None
    except DegenerateSplit as exc:
        files = ", ".join(str(ctx.data / name) for name in ds.TASK_FILES[task])
        raise EvalDataError(f"task {task} ({files}): {exc}") from None


# -- MR, CR, SUBJ, MPQA: eval_classification.eval_nested_kfold -----------------------------------------
def binary(ctx: Context, task: str) -> dict[str, Any]:
    data = ds.read_binary(ctx.data, task)
    order = shuffled_order(len(data.texts), ctx.seed)
    texts = [data.texts[i] for i in order]
    labels = data.labels[order]
    x = ctx.encode(texts, eos=False, what=task)
    if ctx.fast:
        scores, chosen = fast_nested(x, labels, ctx, task)
    else:
        scores, chosen = nested_kfold(x, labels, ctx, task)
    return {
        "acc": 100 * float(np.mean(scores)),
        "fold_acc": [100 * s for s in scores],
        "C": chosen,
        "n": len(texts),
    }


def nested_kfold(x: np.ndarray, y: np.ndarray, ctx: Context, task: str) -> tuple[list[float], list[float]]:
    """Outer 10 contiguous folds; per fold, C by the mean accuracy of 10 contiguous inner folds.

    The 900 inner fits are independent, so ``ctx.jobs`` threads run them (liblinear releases the GIL);
    each fit is deterministic, so the scores do not depend on ``jobs``."""
    outer = kfold(len(x), K)
    inner = [kfold(len(train), K) for train, _ in outer]
    jobs = [(f, j, i) for f in range(len(outer)) for j in range(len(C_GRID)) for i in range(K)]

    def inner_fit(job: tuple[int, int, int]) -> float:
        f, j, i = job
        train = outer[f][0]
        itr, ite = inner[f][i]
        clf = fit_liblinear(x[train[itr]], y[train[itr]], C_GRID[j])
        return float(clf.score(x[train[ite]], y[train[ite]]))

    with ctx.bar(f"{task}: fitting (nested 10-fold, 9 C)", len(jobs) + len(outer)) as advance:
        accs = np.array(parallel_map(inner_fit, jobs, ctx.jobs, advance)).reshape(len(outer), len(C_GRID), K)
        chosen = [C_GRID[best_index([float(np.mean(a)) for a in fold])] for fold in accs]

        def outer_fit(f: int) -> float:
            train, test = outer[f]
            return float(fit_liblinear(x[train], y[train], chosen[f]).score(x[test], y[test]))

        scores = parallel_map(outer_fit, list(range(len(outer))), ctx.jobs, advance)
    return scores, chosen


T = TypeVar("T")
R = TypeVar("R")


def parallel_map(
    fn: Callable[[T], R], items: Sequence[T], jobs: int, advance: Callable[[int], None]
) -> list[R]:
    """``map`` in order over ``jobs`` threads, advancing the progress bar as each item finishes."""
    if jobs <= 1:
        out = []
        for item in items:
            out.append(fn(item))
            advance(1)
        return out
    from concurrent.futures import ThreadPoolExecutor

    def one(item: T) -> R:
        result = fn(item)
        advance(1)
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, items))


def fast_nested(x: np.ndarray, y: np.ndarray, ctx: Context, task: str) -> tuple[list[float], list[float]]:
    """The same 10 outer folds; C chosen once, on the first inner split of the first outer fold's training
    set, and used for every fold; the 9 + 10 fits run as two batched torch runs."""
    classes = np.unique(y)
    outer = kfold(len(x), K)
    train0 = outer[0][0]
    itr, ite = kfold(len(train0), K)[0]
    with ctx.bar(f"{task}: fitting (fast: {len(C_GRID)} + {len(outer)} fits at once)", 2) as advance:
        w = fit_batched(x, y, [Problem(train0[itr], c) for c in C_GRID], classes)
        advance(1)
        held = train0[ite]
        accs = [float(np.mean(predict_batched(wj, x[held], classes) == y[held])) for wj in w]
        c = C_GRID[best_index(accs)]
        final = fit_batched(x, y, [Problem(tr, c) for tr, _ in outer], classes)
        advance(1)
    scores = [
        float(np.mean(predict_batched(final[f], x[te], classes) == y[te])) for f, (_, te) in enumerate(outer)
    ]
    return scores, [c] * len(outer)


# -- cross-validated C, then train on all: TREC and MSRP -------------------------------------------------
def cv_choose_c(
    x: np.ndarray,
    y: np.ndarray,
    folds: list[tuple[np.ndarray, np.ndarray]],
    ctx: Context,
    task: str,
    metric: Callable[[np.ndarray, np.ndarray], float],
) -> tuple[float, list[float]]:
    """``eval_kfold``: the mean over the folds of ``metric`` per C; the first best C."""
    classes = np.unique(y)
    if ctx.fast:  # one split (the first fold) instead of all, the 9 C at once
        tr, te = folds[0]
        with ctx.bar(f"{task}: choosing C (fast: {len(C_GRID)} fits at once)", 1) as advance:
            w = fit_batched(x, y, [Problem(tr, c) for c in C_GRID], classes)
            advance(1)
        scan = [metric(y[te], predict_batched(wj, x[te], classes)) for wj in w]
    else:
        pairs = [(c, fold) for c in C_GRID for fold in folds]

        def fit_one(pair: tuple[float, tuple[np.ndarray, np.ndarray]]) -> float:
            c, (tr, te) = pair
            return metric(y[te], fit_liblinear(x[tr], y[tr], c).predict(x[te]))

        with ctx.bar(f"{task}: cross-validating ({len(folds)}-fold, 9 C)", len(pairs)) as advance:
            vals = np.array(parallel_map(fit_one, pairs, ctx.jobs, advance)).reshape(len(C_GRID), len(folds))
        scan = [float(np.mean(v)) for v in vals]
    return C_GRID[best_index(scan)], scan


def fit_final(x: np.ndarray, y: np.ndarray, c: float, test_x: np.ndarray, fast: bool) -> np.ndarray:
    if fast:
        classes = np.unique(y)
        return predict_batched(
            fit_batched(x, y, [Problem(np.arange(len(x)), c)], classes)[0], test_x, classes
        )
    return fit_liblinear(x, y, c).predict(test_x)


def accuracy(y: np.ndarray, yhat: np.ndarray) -> float:
    return float(np.mean(y == yhat))


def trec(ctx: Context) -> dict[str, Any]:
    """``eval_trec.evaluate(evalcv=True, evaltest=True)``: coarse labels, shuffled train, 10-fold CV."""
    data = ds.read_trec(ctx.data)
    names = sorted(set(data.train_labels) | set(data.test_labels))
    ids = {n: i for i, n in enumerate(names)}  # any numbering scores the same (the original used set order)
    ytr = np.array([ids[n] for n in data.train_labels])
    yte = np.array([ids[n] for n in data.test_labels])
    order = shuffled_order(len(ytr), ctx.seed)
    texts = [data.train_texts[i] for i in order]
    ytr = ytr[order]
    xtr = ctx.encode(texts, eos=False, what="trec train")
    c, scan = cv_choose_c(xtr, ytr, kfold(len(xtr), K), ctx, "trec", accuracy)
    xte = ctx.encode(data.test_texts, eos=False, what="trec test")
    yhat = fit_final(xtr, ytr, c, xte, ctx.fast)
    return {
        "acc": 100 * accuracy(yte, yhat),
        "cv_acc": 100 * max(scan),
        "C": c,
        "n_train": len(ytr),
        "n_test": len(yte),
    }


# -- MSRP: eval_msrp.evaluate(evalcv=True, evaltest=True, use_feats=True) --------------------------------
def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def number_features(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """``eval_msrp.feats``: the six features of Socher et al. on the tokenised strings."""
    out = np.zeros((len(a), 6))
    for i, (sa, sb) in enumerate(zip(a, b, strict=True)):
        ta, tb = sa.split(), sb.split()
        na, nb = {w for w in ta if _is_number(w)}, {w for w in tb if _is_number(w)}
        out[i, 0] = float(na == nb)
        out[i, 1] = float(na == nb and len(na) > 0)
        out[i, 2] = float(na <= nb or nb <= na)
        common = len(set(ta) & set(tb))
        out[i, 3] = common / max(1, len(set(ta)))
        out[i, 4] = common / max(1, len(set(tb)))
        out[i, 5] = 0.5 * (len(ta) / max(1, len(tb)) + len(tb) / max(1, len(ta)))
    return out


def f1(y: np.ndarray, yhat: np.ndarray) -> float:
    tp = float(np.sum((y == 1) & (yhat == 1)))
    denom = float(np.sum(y == 1) + np.sum(yhat == 1))
    return 0.0 if denom == 0 else 2 * tp / denom


def _tokenised(texts: Sequence[str]) -> list[str]:
    from ...models.tokenize import word_tokenize

    return [" ".join(word_tokenize(t)) for t in texts]  # the loader's ' '.join(word_tokenize(s))


def _pair_features(ctx: Context, pairs: ds.Pairs, what: str) -> np.ndarray:
    a, b = _tokenised(pairs.a), _tokenised(pairs.b)
    va, vb = ctx.encode(a, eos=False, what=f"{what} A"), ctx.encode(b, eos=False, what=f"{what} B")
    return np.c_[np.abs(va - vb), va * vb, number_features(a, b)]


def msrp(ctx: Context) -> dict[str, Any]:
    train, test = ds.read_msrp(ctx.data)
    xtr = _pair_features(ctx, train, "msrp train")
    folds = kfold(len(xtr), K, shuffle_seed=ctx.seed)  # KFold(shuffle=True, random_state=1234)
    c, scan = cv_choose_c(xtr, train.y, folds, ctx, "msrp", f1)
    xte = _pair_features(ctx, test, "msrp test")
    yhat = fit_final(xtr, train.y, c, xte, ctx.fast)
    return {
        "acc": 100 * accuracy(test.y, yhat),
        "f1": 100 * f1(test.y, yhat),
        "cv_f1": 100 * max(scan),
        "C": c,
    }


# -- SICK relatedness: eval_sick.evaluate(evaltest=True) --------------------------------------------------
def sick_r(ctx: Context) -> dict[str, Any]:
    from scipy.stats import spearmanr

    from .relatedness import encode_labels, expected_score, pearson, train_softmax

    train, trial, test = ds.read_sick(ctx.data, "sick-r")
    order = shuffled_order(len(train.y), ctx.seed)  # sklearn.utils.shuffle(A, B, scores, random_state=seed)

    def features(a: Sequence[str], b: Sequence[str], what: str) -> np.ndarray:
        va, vb = (
            ctx.encode(list(a), eos=True, what=f"{what} A"),
            ctx.encode(list(b), eos=True, what=f"{what} B"),
        )
        return np.c_[np.abs(va - vb), va * vb]

    xtr = features([train.a[i] for i in order], [train.b[i] for i in order], "sick train")
    ytr = train.y[order]
    xdev = features(trial.a, trial.b, "sick trial")
    rounds: list[float] = []
    with ctx.bar("sick-r: Adam until the trial r stops rising (rounds)", None) as advance:

        def on_round(_: int, r: float) -> None:
            rounds.append(r)
            advance(1)

        predict = train_softmax(
            xtr,
            encode_labels(ytr),
            xdev,
            trial.y,
            seed=ctx.seed,
            epochs_per_check=10 if ctx.fast else 100,
            on_round=on_round,
        )
    xte = features(test.a, test.b, "sick test")
    yhat = expected_score(predict(xte))
    return {
        "r": pearson(yhat, test.y),
        "rho": float(spearmanr(yhat, test.y)[0]),
        "mse": float(np.mean((yhat - test.y) ** 2)),
        "trial_r_per_round": rounds,
    }


# -- SentEval: SICK entailment and STS14 ------------------------------------------------------------------
def sick_e(ctx: Context) -> dict[str, Any]:
    """SentEval ``SICKEntailmentEval`` with ``usepytorch=False``: |u-v|, u*v; C in 2^-2..2^3 by trial
    accuracy (rounded to 0.01 %, first best); test accuracy. Sentences encoded with ``<eos>``, as SentEval's
    ``examples/skipthought.py`` batcher does (``use_eos=True``)."""
    train, trial, test = ds.read_sick(ctx.data, "sick-e")

    def features(p: ds.Pairs, what: str) -> np.ndarray:
        va, vb = ctx.encode(p.a, eos=True, what=f"{what} A"), ctx.encode(p.b, eos=True, what=f"{what} B")
        return np.c_[np.abs(va - vb), va * vb]

    xtr, xdev, xte = features(train, "sick train"), features(trial, "sick trial"), features(test, "sick test")
    classes = np.unique(train.y)
    if ctx.fast:
        w = fit_batched(xtr, train.y, [Problem(np.arange(len(xtr)), c) for c in SENTEVAL_C], classes)
        dev = [round(100 * accuracy(trial.y, predict_batched(wi, xdev, classes)), 2) for wi in w]
        c = SENTEVAL_C[best_index(dev)]
        yhat = predict_batched(w[best_index(dev)], xte, classes)
    else:
        dev = []
        with ctx.bar("sick-e: fitting (6 C)", len(SENTEVAL_C) + 1) as advance:
            for c in SENTEVAL_C:
                dev.append(round(100 * accuracy(trial.y, fit_liblinear(xtr, train.y, c).predict(xdev)), 2))
                advance(1)
            c = SENTEVAL_C[best_index(dev)]
            yhat = fit_liblinear(xtr, train.y, c).predict(xte)
            advance(1)
    return {"acc": round(100 * accuracy(test.y, yhat), 2), "dev_acc": max(dev), "C": c}


def sts14(ctx: Context) -> dict[str, Any]:
    """SentEval ``STS14Eval``: cosine similarity, Pearson and Spearman per set, mean and size-weighted;
    ``<eos>`` on, as SentEval's skip-thoughts batcher."""
    from scipy.stats import pearsonr, spearmanr

    from .relatedness import require_varying

    sets = ds.read_sts14(ctx.data)
    per: dict[str, dict[str, float]] = {}
    for name, p in sets.items():
        va, vb = (
            ctx.encode(p.a, eos=True, what=f"sts14 {name} A"),
            ctx.encode(p.b, eos=True, what=f"sts14 {name} B"),
        )
        va, vb = np.nan_to_num(va.astype(np.float64)), np.nan_to_num(vb.astype(np.float64))
        norms = np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            sim = np.nan_to_num(np.sum(va * vb, axis=1) / norms)
        try:
            require_varying(sim, "cosine similarity")
        except DegenerateSplit as exc:
            raise EvalDataError(f"{ctx.data / f'STS.input.{name}.txt'}: task sts14: {exc}") from None
        per[name] = {
            "pearson": float(pearsonr(sim, p.y)[0]),
            "spearman": float(spearmanr(sim, p.y)[0]),
            "n": len(p.y),
        }
    weights = [v["n"] for v in per.values()]
    prs = [v["pearson"] for v in per.values()]
    sps = [v["spearman"] for v in per.values()]
    return {
        "pearson": float(np.average(prs)),
        "spearman": float(np.average(sps)),
        "pearson_wmean": float(np.average(prs, weights=weights)),
        "spearman_wmean": float(np.average(sps, weights=weights)),
        "sets": per,
    }
