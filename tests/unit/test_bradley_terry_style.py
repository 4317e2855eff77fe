"""Style-controlled Bradley–Terry against a simulated judge with a known length taste, the plain
fit, finite differences, and hand-computed style features."""

import numpy as np
import pytest
from scipy.special import expit

from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.bradley_terry_style import (
    fit_style_bradley_terry,
    rank_changes,
    style_objective,
    variance_shares,
)
from saber_core.rating.comparisons import Comparisons
from saber_core.rating.style import (
    NgramStyle,
    auc,
    basic_features,
    cross_validated_auc,
    displayed_steps,
    latex_density,
    standardize,
)

BETA_LEN = 0.8


def simulate(seed: int, beta=(BETA_LEN, 0.0), nq=30, n=16, rounds=8, sd=0.5):
    """Strengths θ ~ N(0, sd²), lengths and an ignored feature, random pairs each round, and
    outcomes drawn with P(a beats b) = σ(θ_a − θ_b + β·(z_a − z_b))."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, sd, (nq, n))
    raw = np.stack([rng.lognormal(7.0, 0.6, (nq, n)), rng.random((nq, n))], axis=-1)
    z = standardize(np.log(raw).reshape(nq * n, 2))[0].reshape(nq, n, 2)
    q, a, b = [], [], []
    for qq in range(nq):
        for _ in range(rounds):
            perm = rng.permutation(n)
            q += [qq] * (n // 2)
            a += perm[0::2].tolist()
            b += perm[1::2].tolist()
    q, a, b = map(np.asarray, (q, a, b))
    s = theta + z @ np.asarray(beta)
    y = (rng.random(len(q)) < expit(s[q, a] - s[q, b])).astype(float)
    return Comparisons(q, a, b, y, nq, n), z


def test_recovers_a_known_length_taste_and_no_taste_for_an_ignored_feature():
    truth = np.array([BETA_LEN, 0.0])
    covered = np.zeros(2)
    for seed in range(5):
        comparisons, z = simulate(seed)
        fit = fit_style_bradley_terry(comparisons, z)
        covered += (fit.lower <= truth) & (truth <= fit.upper)
        assert abs(fit.beta[1]) < 3 * fit.se[1]
        assert fit.beta[0] > 5 * fit.se[0]  # the taste is found, not just "not excluded"
    assert covered.min() >= 4  # the 95% intervals hold the truth in at least 4 of 5 seeds


def test_without_features_the_fit_is_the_plain_fit():
    comparisons, _ = simulate(1, rounds=5)
    z = np.zeros((comparisons.n_queries, comparisons.n_players, 0))
    for c in (0.3, 1.0):
        fit = fit_style_bradley_terry(comparisons, z, C=c)
        assert np.abs(fit.theta - fit_bradley_terry(comparisons, C=c)).max() < 1e-8


def test_plain_fit_is_the_optimum_in_theta_when_beta_is_held_at_zero():
    comparisons, z = simulate(2, rounds=5)
    theta = fit_bradley_terry(comparisons, C=1.0)
    kept = comparisons.select(comparisons.decided)
    n = comparisons.n_players
    ia, ib = kept.q * n + kept.a, kept.q * n + kept.b
    x = np.concatenate([theta.ravel(), np.zeros(2)])
    grad = style_objective(x, ia, ib, kept.y, z.reshape(-1, 2), 1.0)[1]
    assert np.abs(grad[:-2]).max() < 1e-8
    assert np.abs(grad[-2:]).max() > 1.0  # the length taste pulls β away from 0


def _small_problem():
    comparisons, z = simulate(3, nq=3, n=6, rounds=4, sd=1.0)
    kept = comparisons.select(comparisons.decided)
    n = comparisons.n_players
    return comparisons, kept.q * n + kept.a, kept.q * n + kept.b, kept.y, z


def test_gradient_equals_finite_differences():
    _, ia, ib, y, z = _small_problem()
    zf = z.reshape(-1, 2)
    x = np.random.default_rng(0).normal(size=zf.shape[0] + 2)
    grad = style_objective(x, ia, ib, y, zf, 0.7)[1]
    h = 1e-6
    numeric = [
        (
            style_objective(x + h * e, ia, ib, y, zf, 0.7)[0]
            - style_objective(x - h * e, ia, ib, y, zf, 0.7)[0]
        )
        / (2 * h)
        for e in np.eye(len(x))
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


def test_beta_interval_is_the_inverse_hessian_of_f_over_c():
    comparisons, ia, ib, y, z = _small_problem()
    c = 0.7
    fit = fit_style_bradley_terry(comparisons, z, C=c)
    x = np.concatenate([fit.theta.ravel(), fit.beta])
    h = 1e-5
    zf = z.reshape(-1, 2)
    hess = np.array(
        [
            (
                style_objective(x + h * e, ia, ib, y, zf, c)[1]
                - style_objective(x - h * e, ia, ib, y, zf, c)[1]
            )
            / (2 * h)
            for e in np.eye(len(x))
        ]
    )
    cov = c * np.linalg.inv(hess)[-2:, -2:]
    np.testing.assert_allclose(fit.se, np.sqrt(np.diag(cov)), rtol=1e-5)
    np.testing.assert_allclose(fit.upper - fit.beta, 1.959964 * fit.se, rtol=1e-6)


def test_variance_shares_by_hand():
    theta = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    z = np.array([[[1.0], [0.0], [-1.0]], [[0.0], [1.0], [2.0]]])
    games = np.ones((2, 3))
    shares, total = variance_shares(theta, z, np.array([0.5]), games)
    style = z[..., 0] * 0.5
    expected = (np.var(style[0]) + np.var(style[1])) / (
        np.var(theta[0] + style[0]) + np.var(theta[1] + style[1])
    )
    assert shares[0] == pytest.approx(expected)
    assert total == pytest.approx(expected)


def test_rank_changes():
    plain = np.array([[3.0, 2.0, 1.0, 0.0]])
    assert rank_changes(plain, plain) == (1.0, 0)
    rho, changed = rank_changes(plain, np.array([[2.0, 3.0, 1.0, 0.0]]))
    assert changed == 2
    assert rho == pytest.approx(1 - 6 * 2 / (4 * 15))


def test_style_features_by_hand():
    text = "Let $x=1$. Then\n1. add\n2. square\n$$x^2$$"
    assert latex_density(text) == pytest.approx((5 + 7) / len(text))
    assert latex_density(r"See \(a\) and \[b\] here") == pytest.approx(10 / 24)
    assert displayed_steps(text) == 3
    assert displayed_steps("Step 1 think\n- a\n* b\n• c\nno step") == 4
    features = basic_features(["abc", ""])
    np.testing.assert_allclose(features[:, 0], [np.log(4.0), 0.0])
    z, varies = standardize(np.array([[1.0, 5.0], [3.0, 5.0]]))
    np.testing.assert_allclose(z, [[-1.0, 0.0], [1.0, 0.0]])
    assert varies.tolist() == [True, False]


def test_auc_equals_the_pairwise_count():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 40).astype(float)
    labels = rng.random(40) < 0.5
    pos, neg = scores[labels], scores[~labels]
    expected = ((pos[:, None] > neg).sum() + 0.5 * (pos[:, None] == neg).sum()) / (
        len(pos) * len(neg)
    )
    assert auc(scores, labels) == pytest.approx(expected)


def _texts(rng, words, k=40):
    return [" ".join(rng.choice(words, 30)) for _ in range(k)]


def test_ngram_style_tells_two_styles_apart_and_not_one_from_itself():
    rng = np.random.default_rng(0)
    llm_words = ["therefore", "we", "conclude", "thus", "hence", "note", "that", "clearly"]
    human_words = ["so", "ok", "then", "we", "get", "just", "plug", "in"]
    llm, human = _texts(rng, llm_words), _texts(rng, human_words)
    assert cross_validated_auc(llm, human, seed=0) > 0.95
    same = _texts(rng, llm_words + human_words, 80)
    assert abs(cross_validated_auc(same[:40], same[40:], seed=0) - 0.5) < 0.2
    model = NgramStyle.fit(llm, human)
    assert model.score(["therefore we conclude"])[0] > 0 > model.score(["so ok just plug"])[0]
    assert model.score([""])[0] == 0.0
