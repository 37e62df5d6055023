"""A plain re-reading of the original scripts (ryankiros/skip-thoughts ``eval_classification.py``,
``eval_trec.py``, ``eval_msrp.py``, ``eval_sick.py``), loops kept as they were, for the tests to hold
lnserve's protocol steps against. scikit-learn 0.1x's ``cross_validation.KFold`` is rewritten here from
its definition; ``LogisticRegression(C=s)`` of that time is liblinear, one-vs-rest."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier


class OldKFold:
    """``sklearn.cross_validation.KFold(n, n_folds, shuffle=False, random_state=None)`` (0.15-0.17)."""

    def __init__(
        self, n: int, n_folds: int = 3, shuffle: bool = False, random_state: int | None = None
    ) -> None:
        self.n, self.n_folds = n, n_folds
        self.idxs = np.arange(n)
        if shuffle:
            np.random.RandomState(random_state).shuffle(self.idxs)

    def __iter__(self):
        fold_sizes = (self.n // self.n_folds) * np.ones(self.n_folds, dtype=int)
        fold_sizes[: self.n % self.n_folds] += 1
        current = 0
        ind = np.arange(self.n)
        for fold_size in fold_sizes:  # _PartitionIterator.__iter__ over _iter_test_masks
            start, stop = current, current + fold_size
            test_mask = np.zeros(self.n, dtype=bool)
            test_mask[self.idxs[start:stop]] = True
            yield ind[np.logical_not(test_mask)], ind[test_mask]
            current = stop


def old_logreg(c: float, multiclass: bool = False):
    clf = LogisticRegression(C=c, solver="liblinear")
    return OneVsRestClassifier(clf) if multiclass else clf


def shuffle_data(x: list, labels: np.ndarray, seed: int = 1234) -> tuple[list, np.ndarray]:
    prng = np.random.RandomState(seed)
    inds = np.arange(len(x))
    prng.shuffle(inds)
    return [x[i] for i in inds], labels[inds]


def eval_nested_kfold(features: np.ndarray, labels: np.ndarray, k: int = 10, seed: int = 1234) -> list[float]:
    scan = [2**t for t in range(0, 9, 1)]
    kf = OldKFold(len(features), n_folds=k, random_state=seed)
    scores = []
    for train, test in kf:
        x_train, y_train = features[train], labels[train]
        x_test, y_test = features[test], labels[test]
        scanscores = []
        for s in scan:
            innerkf = OldKFold(len(x_train), n_folds=k, random_state=seed + 1)
            innerscores = []
            for innertrain, innertest in innerkf:
                clf = old_logreg(s)
                clf.fit(x_train[innertrain], y_train[innertrain])
                innerscores.append(clf.score(x_train[innertest], y_train[innertest]))
            scanscores.append(np.mean(innerscores))
        s = scan[int(np.argmax(scanscores))]
        clf = old_logreg(s)
        clf.fit(x_train, y_train)
        scores.append(clf.score(x_test, y_test))
    return scores


def trec_eval_kfold(features: np.ndarray, labels: np.ndarray, k: int = 10, seed: int = 1234) -> float:
    scan = [2**t for t in range(0, 9, 1)]
    kf = list(OldKFold(len(features), n_folds=k, random_state=seed))
    scores = []
    for s in scan:
        scanscores = []
        for train, test in kf:
            clf = old_logreg(s, multiclass=True)
            clf.fit(features[train], labels[train])
            scanscores.append(clf.score(features[test], labels[test]))
        scores.append(np.mean(scanscores))
    return scan[int(np.argmax(scores))]


def trec_evaluate(
    train_f: np.ndarray, train_labels: np.ndarray, test_f: np.ndarray, test_labels: np.ndarray
) -> float:
    """``evaluate(evalcv=True, evaltest=True)`` after encoding (train already shuffled)."""
    c = trec_eval_kfold(train_f, train_labels)
    clf = old_logreg(c, multiclass=True)
    clf.fit(train_f, train_labels)
    return float(clf.score(test_f, test_labels))


def encode_labels(labels: list[float], nclass: int = 5) -> np.ndarray:
    y = np.zeros((len(labels), nclass)).astype("float32")
    for j, yj in enumerate(labels):
        for i in range(nclass):
            if i + 1 == np.floor(yj) + 1:
                y[j, i] = yj - np.floor(yj)
            if i + 1 == np.floor(yj):
                y[j, i] = np.floor(yj) - yj + 1
    return y
