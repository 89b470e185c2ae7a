"""The label holder's AUC (numpy) against scikit-learn's roc_auc_score."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from securevfl.model.evaluation import average_precision, binary_auc, metrics_for


@pytest.mark.parametrize("seed", range(6))
def test_auc_equals_scikit_learns_with_and_without_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    y = rng.integers(0, 2, size=n)
    y[0], y[-1] = 0, 1  # both classes
    scores = rng.random(n)
    if seed % 2:  # many ties, as a coarse or constant-ish model gives
        scores = np.round(scores * 4) / 4
    assert binary_auc(y, scores) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    labels = np.where(y == 1, 7, -3)  # other label values: the larger is the positive class
    assert binary_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_auc_edge_cases():
    y = np.array([0, 0, 1, 1])
    assert binary_auc(y, np.array([0.1, 0.2, 0.8, 0.9])) == 1.0
    assert binary_auc(y, np.array([0.9, 0.8, 0.2, 0.1])) == 0.0
    assert binary_auc(y, np.full(4, 0.5)) == 0.5  # a constant predictor
    assert metrics_for("binary", y, np.array([0.1, 0.6, 0.4, 0.9])) == {
        "accuracy": 0.5,
        "auc": 0.75,
    }
    with pytest.raises(ValueError, match="two classes"):
        binary_auc(np.zeros(3), np.ones(3))


@pytest.mark.parametrize("seed", range(6))
def test_average_precision_equals_scikit_learns_with_and_without_ties(seed):
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    y = rng.integers(0, 2, size=n)
    y[0], y[-1] = 0, 1
    scores = rng.random(n)
    if seed % 2:  # ties: a coarse model
        scores = np.round(scores * 4) / 4
    got = average_precision(y, scores)
    assert got == pytest.approx(average_precision_score(y, scores), abs=1e-12)
    assert average_precision(np.zeros(5, dtype=int), rng.random(5)) == 0.0  # no positive row


def test_average_precision_edge_cases():
    y = np.array([0, 0, 1, 1])
    assert average_precision(y, np.array([0.1, 0.2, 0.8, 0.9])) == 1.0
    assert average_precision(y, np.full(4, 0.5)) == 0.5  # one threshold: the positive share
    # the highest score negative, then a positive: P = 1/2 at R = 1/2, then 2/3 at R = 1
    assert average_precision(y, np.array([0.9, 0.1, 0.8, 0.7])) == pytest.approx(
        0.5 * 0.5 + 0.5 * 2 / 3
    )
