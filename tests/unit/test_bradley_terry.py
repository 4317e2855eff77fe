"""Bradley–Terry fit: equal to the scikit-learn reference, a direct optimizer, and a hand case."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq, minimize
from scipy.special import expit
from scipy.stats import spearmanr

from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.comparisons import Comparisons
from saber_core.tournament.swiss import run_swiss


def design(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Rows x = e_a - e_b."""
    x = np.zeros((len(a), n))
    x[np.arange(len(a)), a] = 1.0
    x[np.arange(len(a)), b] = -1.0
    return x


def objective(beta: np.ndarray, x: np.ndarray, y: np.ndarray, c: float) -> tuple[float, np.ndarray]:
    """½‖β‖² + C Σ [log(1 + e^z) − y z], written independently of the module."""
    z = x @ beta
    value = 0.5 * beta @ beta + c * np.sum(np.logaddexp(0.0, z) - y * z)
    return value, beta + c * x.T @ (expit(z) - y)


def swiss_data(n_q: int, n: int, rounds: int, seed: int):
    rng = np.random.default_rng(seed)
    res = run_swiss(
        n_q, n, rounds, lambda r, p: rng.integers(0, 2, p.shape[:2]).astype(float), seed=seed
    )
    return res.comparisons()


@pytest.mark.parametrize(("n", "rounds", "seed"), [(30, 8, 0), (40, 12, 1), (150, 20, 2)])
def test_matches_sklearn_logistic_regression(n: int, rounds: int, seed: int) -> None:
    from sklearn.linear_model import LogisticRegression

    n_q = 3
    rows = swiss_data(n_q, n, rounds, seed)
    q, a, b, o = rows.q, rows.a, rows.b, rows.y
    beta = fit_bradley_terry(rows)
    for qi in range(n_q):
        m = q == qi
        lr = LogisticRegression(fit_intercept=False, C=1.0, tol=1e-10, max_iter=10000)
        ref = lr.fit(design(a[m], b[m], n), o[m]).coef_[0]
        assert np.corrcoef(ref, beta[qi])[0, 1] >= 0.9999
        np.testing.assert_allclose(beta[qi], ref, atol=1e-4)


@pytest.mark.parametrize("c", [0.3, 1.0, 4.0])
def test_soft_outcomes_match_direct_minimization(c: float) -> None:
    rng = np.random.default_rng(3)
    n_q, n = 2, 12
    rows = swiss_data(n_q, n, 6, seed=5)
    q, a, b = rows.q, rows.a, rows.b
    y = rng.random(len(q))  # soft: probability that a beats b
    beta = fit_bradley_terry(rows.with_outcomes(y), C=c)
    for qi in range(n_q):
        m = q == qi
        x = design(a[m], b[m], n)
        ref = minimize(objective, np.zeros(n), args=(x, y[m], c), jac=True, method="BFGS",
                       options={"gtol": 1e-12, "maxiter": 10000}).x  # fmt: skip
        np.testing.assert_allclose(beta[qi], ref, atol=1e-7)
        _, grad = objective(beta[qi], x, y[m], c)
        assert np.linalg.norm(grad) < 1e-9  # the stopping rule holds at the returned point


def test_two_players_hand_solution() -> None:
    # f(β) = ½(β_a² + β_b²) + log(1 + e^{-(β_a - β_b)}). Stationarity: β_a = σ(-(β_a - β_b)) =
    # -β_b, so β_a = t = -β_b with t = σ(-2t) (a unique root in (0, ½)).
    t = brentq(lambda s: s - expit(-2.0 * s), 0.0, 0.5)
    assert 0.33 < t < 0.34
    beta = fit_bradley_terry(Comparisons([0], [0], [1], [1.0], n_queries=1, n_players=2))
    np.testing.assert_allclose(beta, [[t, -t]], atol=1e-12)
    # 'b won' flips the sign; the same comparison written (b, a) with outcome 0 is the same data
    np.testing.assert_allclose(
        fit_bradley_terry(Comparisons([0], [0], [1], [0.0], 1, 2)), [[-t, t]]
    )
    np.testing.assert_allclose(
        fit_bradley_terry(Comparisons([0], [1], [0], [0.0], 1, 2)), [[t, -t]]
    )
    np.testing.assert_array_equal(rescale_ratings(beta), [[5.0, 0.0]])


def test_nan_rows_ignored_and_unseen_players_zero() -> None:
    q = np.array([0, 0, 0, 1, 1])
    a = np.array([0, 1, 0, 2, 0])
    b = np.array([1, 2, 2, 3, 1])
    o = np.array([1.0, 0.0, np.nan, 1.0, np.nan])
    rows = Comparisons(q, a, b, o, n_queries=3, n_players=5)
    beta = fit_bradley_terry(rows)
    np.testing.assert_array_equal(beta, fit_bradley_terry(rows.select(~np.isnan(o))))
    assert np.all(beta[0, 3:] == 0.0) and np.all(beta[1, [0, 1, 4]] == 0.0)
    assert np.all(beta[2] == 0.0)  # a query with no comparisons at all
    # 0 and 2 each beat 1 once: symmetric winners above zero, the loser below
    assert beta[0, 0] == pytest.approx(beta[0, 2]) and beta[0, 0] > 0 > beta[0, 1]


@pytest.mark.parametrize(
    ("q", "a", "b", "o", "message"),
    [
        ([0, 0, 2], [0, 1, 0], [1, 2, 1], [1, 0, 1], r"row 2: field 'q'"),
        ([0, 0, 0], [0, 5, 0], [1, 2, 1], [1, 0, 1], r"row 1: field 'a'"),
        ([0, 0, 0], [0, 1, 0], [1, 2, -1], [1, 0, 1], r"row 2: field 'b'"),
        ([0, 0, 0], [0, 1, 3], [1, 2, 3], [1, 0, 1], r"row 2: field 'b' equals field 'a'"),
        ([0, 0, 0], [0, 1, 0], [1, 2, 1], [1, 1.5, 1], r"row 1: field 'y'"),
        ([0, 0, 0], [0, 1, 0], [1, 2, 1], [-0.1, 1, 1], r"row 0: field 'y'"),
    ],
)
def test_input_validation_names_row_and_field(q, a, b, o, message) -> None:
    with pytest.raises(ValueError, match=message):
        fit_bradley_terry(Comparisons(q, a, b, o, n_queries=2, n_players=5))


def test_max_iter_exhausted_warns() -> None:
    with pytest.warns(RuntimeWarning, match="did not reach"):
        fit_bradley_terry(swiss_data(1, 10, 4, seed=0), max_iter=1)


def test_rescale_ratings() -> None:
    rng = np.random.default_rng(0)
    beta = np.vstack([rng.normal(size=7), np.full(7, 0.3), [0, 1, 2, 3, 4, 5, 10.0]])
    out = rescale_ratings(beta)
    assert out[0].min() == 0.0 and out[0].max() == 5.0
    assert np.array_equal(np.argsort(out[0]), np.argsort(beta[0]))
    np.testing.assert_array_equal(out[1], 0.0)  # constant query → all zeros
    np.testing.assert_allclose(out[2], [0, 0.5, 1, 1.5, 2, 2.5, 5])
    np.testing.assert_allclose(rescale_ratings(3.0 * beta + 2.0), out)  # affine invariance


@pytest.mark.parametrize("seed", [0, 1])
def test_swiss_then_bt_recovers_latent_strengths(seed: int) -> None:
    n_q, n = 2, 150
    rng = np.random.default_rng(seed)
    truth = rng.normal(scale=1.5, size=(n_q, n))
    judge_rng = np.random.default_rng(seed + 1000)

    def judge(_round: int, pairs: np.ndarray) -> np.ndarray:
        qi = np.arange(n_q)[:, None]
        p_first = expit(truth[qi, pairs[..., 0]] - truth[qi, pairs[..., 1]])
        return (judge_rng.random(p_first.shape) < p_first).astype(float)

    res = run_swiss(n_q, n, 20, judge, seed=seed)
    beta = fit_bradley_terry(res.comparisons())
    ratings = rescale_ratings(beta)
    for qi in range(n_q):
        assert spearmanr(ratings[qi], truth[qi]).statistic > 0.8


def test_rescale_ratings_never_exceeds_five() -> None:
    """Regression: ``5 (β − lo) / span`` rounded to 5 + 1 ulp for some spans."""
    beta = np.random.default_rng(3).normal(size=(20_000, 12))
    out = rescale_ratings(beta)
    assert out.max() == 5.0 and out.min() == 0.0
    assert np.all(out.max(axis=1) == 5.0)
