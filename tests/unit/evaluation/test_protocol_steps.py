"""Each protocol step against a plain re-reading of the original scripts (tests/support/
skipthoughts_reference.py): fold boundaries, shuffles, C selection, label encoding, early stopping."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from sklearn.utils import shuffle as sk_shuffle

from lnserve.app.evaluation import folds, protocols
from lnserve.app.evaluation.linear import Problem, fit_batched, fit_liblinear, predict_batched
from lnserve.app.evaluation.relatedness import encode_labels, expected_score, train_softmax
from tests.support import eval_sets
from tests.support import skipthoughts_reference as ref


@pytest.mark.parametrize(("n", "k"), [(10, 10), (23, 10), (10662, 10), (4076, 10), (99, 7)])
def test_contiguous_folds_match_old_kfold(n: int, k: int) -> None:
    mine = folds.kfold(n, k)
    old = list(ref.OldKFold(n, n_folds=k, random_state=1234))
    assert len(mine) == len(old) == k
    for (tr, te), (otr, ote) in zip(mine, old, strict=True):
        assert te.tolist() == ote.tolist() and tr.tolist() == otr.tolist()
    assert [len(te) for _, te in mine][: n % k] == [n // k + 1] * (n % k)  # the first n % k are longer


def test_shuffled_folds_match_old_kfold_with_shuffle() -> None:
    mine = folds.kfold(57, 10, shuffle_seed=1234)
    old = list(ref.OldKFold(57, n_folds=10, shuffle=True, random_state=1234))
    for (tr, te), (otr, ote) in zip(mine, old, strict=True):
        assert te.tolist() == ote.tolist() and tr.tolist() == otr.tolist()


def test_shuffle_is_randomstate_shuffle_and_sklearn_utils_shuffle() -> None:
    order = folds.shuffled_order(1000, 1234)
    texts = [str(i) for i in range(1000)]
    mine, _ = ref.shuffle_data(texts, np.zeros(1000))
    assert [texts[i] for i in order] == mine
    assert order.tolist() == sk_shuffle(np.arange(1000), random_state=1234).tolist()


def test_first_best_c_wins_ties() -> None:
    assert folds.best_index([0.5, 0.7, 0.7, 0.6]) == 1
    assert tuple(float(2**t) for t in range(9)) == folds.C_GRID


def _features(n: int, d: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(float)
    x = rng.normal(size=(n, d)) * noise
    x[:, 0] += np.where(y == 1, 1.0, -1.0)
    return x.astype(np.float32), y


class ArrayEncoder:
    """Vectors looked up by sentence text: features whose answer is known."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def __call__(self, texts: Sequence[str], *, eos: bool, what: str = "") -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


@pytest.mark.parametrize("jobs", [1, 3])
def test_nested_cv_equals_the_original_loop(tmp_path: Path, jobs: int) -> None:
    """MR end to end on known vectors: shuffle, outer/inner folds, C per fold, accuracy (threads or not)."""
    eval_sets.write_binary(tmp_path, n=40)
    from lnserve.app.evaluation.datasets import read_binary

    data = read_binary(tmp_path, "mr")
    x, _ = _features(len(data.texts), 6, 1.2, 0)
    x[:, 0] = np.where(data.labels == 1, 0.6, -0.6) + x[:, 0]  # informative but noisy
    table = dict(zip(data.texts, x, strict=False))
    vectors = np.stack([table[t] for t in data.texts])  # duplicates keep one vector, as the lookup does
    result = protocols.binary(protocols.Context(ArrayEncoder(table), tmp_path, jobs=jobs), "mr")
    texts, labels = ref.shuffle_data(data.texts, data.labels)
    expected = ref.eval_nested_kfold(np.stack([table[t] for t in texts]), labels)
    assert result["fold_acc"] == pytest.approx([100 * s for s in expected], abs=1e-9)
    assert result["acc"] == pytest.approx(100 * np.mean(expected), abs=1e-9)
    assert vectors.shape[0] == len(data.texts)


def test_trec_equals_the_original_loop(tmp_path: Path) -> None:
    eval_sets.write_trec(tmp_path, n_train=90, n_test=30)
    from lnserve.app.evaluation.datasets import read_trec

    data = read_trec(tmp_path)
    names = sorted(set(data.train_labels))
    rng = np.random.default_rng(5)
    table = {}
    for t, lab in zip(data.train_texts + data.test_texts, data.train_labels + data.test_labels, strict=True):
        v = rng.normal(size=8) * 0.9
        v[names.index(lab)] += 1.0
        table[t] = v.astype(np.float32)
    result = protocols.trec(protocols.Context(ArrayEncoder(table), tmp_path))
    ytr = np.array([names.index(s) for s in data.train_labels])
    order = folds.shuffled_order(len(ytr), 1234)
    train_f = np.stack([table[data.train_texts[i]] for i in order])
    test_f = np.stack([table[t] for t in data.test_texts])
    yte = np.array([names.index(s) for s in data.test_labels])
    assert result["acc"] == pytest.approx(100 * ref.trec_evaluate(train_f, ytr[order], test_f, yte), abs=1e-9)


def test_label_encoding_matches_tree_lstm_and_expected_score() -> None:
    scores = np.array([1.0, 1.3, 2.5, 3.0, 4.7, 4.99, 5.0])
    y = encode_labels(scores)
    assert np.array_equal(y, ref.encode_labels(scores.tolist()))
    assert np.allclose(expected_score(y.astype(np.float64)), scores, atol=1e-6)
    assert np.allclose(y.sum(1), 1.0)


def test_number_features_by_hand() -> None:
    f = protocols.number_features(["a 3 b 4", "x y"], ["a 3 b", "x y z z"])
    assert f[0].tolist() == pytest.approx([0, 0, 1, 3 / 4, 3 / 3, 0.5 * (4 / 3 + 3 / 4)])
    assert f[1].tolist() == pytest.approx([1, 0, 1, 2 / 2, 2 / 3, 0.5 * (2 / 4 + 4 / 2)])


def _relatedness_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    target = rng.uniform(1, 5, 300)
    x = rng.normal(size=(300, 12)).astype(np.float32)
    x[:, 0] = (target - 3) * 2 + rng.normal(size=300) * 0.5
    return x, target


def test_early_stopping_stops_at_the_first_round_that_does_not_beat_the_best() -> None:
    """A trial set scored against the training signal: r falls after round 1, so training stops at
    round 2 and keeps round 1's weights."""
    x, target = _relatedness_data()
    dev_x, dev_y = x[:100], 6.0 - target[:100]
    rounds: list[float] = []
    predict = train_softmax(
        x[100:],
        encode_labels(target[100:]),
        dev_x,
        dev_y,
        seed=1,
        epochs_per_check=5,
        on_round=lambda _n, r: rounds.append(r),
    )
    assert len(rounds) == 2 and rounds[1] < rounds[0]
    kept = np.corrcoef(expected_score(predict(dev_x)), dev_y)[0, 1]
    assert kept == pytest.approx(rounds[0], abs=1e-6)


def test_training_goes_on_while_the_trial_r_rises() -> None:
    x, target = _relatedness_data()
    rounds: list[float] = []
    predict = train_softmax(
        x[100:],
        encode_labels(target[100:]),
        x[:100],
        target[:100],
        seed=1,
        epochs_per_check=5,
        max_rounds=4,
        on_round=lambda _n, r: rounds.append(r),
    )
    assert len(rounds) == 4 and all(b > a for a, b in itertools.pairwise(rounds))
    kept = np.corrcoef(expected_score(predict(x[:100])), target[:100])[0, 1]
    assert kept == pytest.approx(rounds[-1], abs=1e-6)


def test_batched_fast_fit_agrees_with_liblinear() -> None:
    x, y = _features(400, 10, 0.8, 3)
    problems = [Problem(np.arange(300), c) for c in (1.0, 16.0)]
    w = fit_batched(x, y, problems, np.array([0.0, 1.0]))
    for p, prob in enumerate(problems):
        clf = fit_liblinear(x[:300], y[:300], prob.c)
        sk = np.r_[clf.coef_[0], clf.intercept_]
        assert np.allclose(w[p, 0], sk, atol=2e-2 * max(1.0, np.abs(sk).max()))
        agree = np.mean(predict_batched(w[p], x[300:], np.array([0.0, 1.0])) == clf.predict(x[300:]))
        assert agree >= 0.97
