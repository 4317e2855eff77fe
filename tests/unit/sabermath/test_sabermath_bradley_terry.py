"""docs/sabermath.md §11: Bradley–Terry: the published strengths equal scikit-learn's
LogisticRegression(fit_intercept=False, C=1.0) on the published design (built here as
bradley_terry.py builds it), the exact fix is the penalized optimum, relevance is min–max × 5."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from saber_core.rating.bradley_terry_published import (
    bt_relevance,
    exact_strengths,
    published_strengths,
    relevance_scores,
)
from saber_core.rating.comparisons import Comparisons


def sklearn_strengths(a, b, y, n_players):
    """The published design: +1/−1 columns over the players seen (first appearance in the
    Sample-1 column, then Sample 2), the zero row of weight 0 when all labels agree."""
    players = list(dict.fromkeys([*a.tolist(), *b.tolist()]))
    column = {p: i for i, p in enumerate(players)}
    x = np.zeros((len(a), len(players)))
    x[np.arange(len(a)), [column[p] for p in a.tolist()]] = 1.0
    x[np.arange(len(a)), [column[p] for p in b.tolist()]] = -1.0
    weights = np.ones(len(a))
    labels = y.astype(float)
    if np.all(labels == labels[0]):
        x = np.vstack([x, np.zeros(len(players))])
        labels = np.append(labels, 1.0 - labels[0])
        weights = np.append(weights, 0.0)
    model = LogisticRegression(fit_intercept=False, C=1.0).fit(x, labels, sample_weight=weights)
    out = np.full(n_players, np.nan)
    out[players] = model.coef_[0]
    return out


def random_design(seed: int, n_queries: int, n_players: int, n_rows: int, all_equal: bool):
    rng = np.random.default_rng(seed)
    q = np.repeat(np.arange(n_queries), n_rows)
    a = rng.integers(0, n_players, q.size)
    b = (a + rng.integers(1, n_players, q.size)) % n_players
    strength = rng.normal(size=(n_queries, n_players)) * 1.5
    y = (rng.random(q.size) < 1 / (1 + np.exp(strength[q, b] - strength[q, a]))).astype(float)
    if all_equal:
        y[q == 1] = 1.0
        y[q == 2] = 0.0
    y[rng.random(q.size) < 0.05] = np.nan  # dropped matches are not recorded
    return Comparisons(q, a, b, y, n_queries, n_players)


@pytest.mark.parametrize(
    ("seed", "n_players", "n_rows"), [(0, 12, 40), (1, 30, 200), (2, 6, 9), (3, 50, 500)]
)
def test_published_strengths_equal_sklearn(seed, n_players, n_rows):
    rows = random_design(seed, 4, n_players, n_rows, all_equal=True)
    got = published_strengths(rows)
    for query in range(rows.n_queries):
        keep = (rows.q == query) & rows.decided
        expected = sklearn_strengths(rows.a[keep], rows.b[keep], rows.y[keep], n_players)
        assert np.array_equal(np.isnan(got[query]), np.isnan(expected))
        np.testing.assert_allclose(got[query], expected, rtol=0, atol=1e-6, equal_nan=True)


def test_exact_fix_is_the_penalized_optimum_and_differs_from_lbfgs():
    rows = random_design(4, 3, 40, 400, all_equal=False)
    exact, published = exact_strengths(rows), published_strengths(rows)
    for query in range(3):
        keep = (rows.q == query) & rows.decided
        a, b, y = rows.a[keep], rows.b[keep], rows.y[keep]
        beta = np.nan_to_num(exact[query])
        p = 1 / (1 + np.exp(-(beta[a] - beta[b])))
        grad = beta + np.bincount(a, p - y, 40) - np.bincount(b, p - y, 40)
        assert np.abs(grad).max() < 1e-8  # ½‖β‖² + Σ logloss is stationary
    assert np.nanmax(np.abs(exact - published)) > 1e-6  # lbfgs stops at tol 1e-4


def test_relevance_is_min_max_times_five_with_nan_for_unplayed_candidates():
    strengths = np.array([[0.5, -1.0, np.nan, 2.0], [1.0, 1.0, 1.0, 1.0]])
    got = relevance_scores(strengths)
    expected = [(0.5 + 1.0) / 3.0 * 5, 0.0, np.nan, 5.0]
    np.testing.assert_array_equal(got[0], expected)
    assert np.isnan(got[1]).all()  # max = min: the published script divides by zero
    rows = Comparisons([0, 0], [0, 1], [1, 2], [1.0, 1.0], 1, 4)  # candidate 3 never plays
    for bt_exact in (False, True):
        scores = bt_relevance(rows, bt_exact=bt_exact)[0]
        assert np.isnan(scores[3]) and scores[0] == 5.0 and scores[2] == 0.0
