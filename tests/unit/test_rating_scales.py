"""Label scales (saber_core.rating.scales) against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import expit
from scipy.stats import norm

from saber_core.rating.bradley_terry import rescale_ratings
from saber_core.rating.scales import SCALES, ScaleParams, scale_ratings


def test_minmax_by_hand_and_equal_to_the_published_rescale():
    beta = np.array([[-1.0, 0.0, 3.0], [2.0, 2.0, 2.0]])
    out = scale_ratings("minmax", beta)
    np.testing.assert_allclose(out, [[0.0, 1.25, 5.0], [0.0, 0.0, 0.0]])
    rng = np.random.default_rng(0)
    beta = rng.normal(size=(5, 30))
    np.testing.assert_allclose(scale_ratings("minmax", beta), rescale_ratings(beta))


def test_quantile_anchors_by_hand():
    beta = np.arange(11.0)[None]  # quantiles 0.1 and 0.9 are 1 and 9 (linear interpolation)
    out = scale_ratings("quantile", beta, params=ScaleParams(quantile_low=0.1, quantile_high=0.9))
    np.testing.assert_allclose(out[0], 5 * np.clip((np.arange(11.0) - 1) / 8, 0, 1))
    # one wild extreme moves min–max labels, not the robust ones
    wild = np.arange(11.0)[None].copy()
    wild[0, -1] = 100.0
    robust = scale_ratings(
        "quantile", wild, params=ScaleParams(quantile_low=0.1, quantile_high=0.9)
    )
    assert robust[0, 5] == pytest.approx(out[0, 5]) and robust[0, -1] == 5.0
    assert scale_ratings("minmax", wild)[0, 5] == pytest.approx(0.25)


def test_zscore_noise_correction_by_hand():
    beta = np.array([[-1.0, 0.0, 1.0, 2.0]])  # mean 0.5, variance 1.25
    out = scale_ratings("zscore", beta, noise_var=np.full((1, 4), 0.25))  # signal variance 1
    np.testing.assert_allclose(out, [[1.0, 2.0, 3.0, 4.0]])  # 2.5 + z (z_width 2.5)
    plain = scale_ratings("zscore", beta)  # no noise: z = (β − 0.5) / √1.25
    np.testing.assert_allclose(plain, 2.5 + (beta - 0.5) / np.sqrt(1.25))
    floored = scale_ratings("zscore", beta, noise_var=np.array([5.0]))  # (Q,) form, all noise
    np.testing.assert_allclose(floored, np.clip(2.5 + (beta - 0.5) / np.sqrt(0.125), 0, 5))


def test_posterior_gain_by_hand():
    beta = np.array([[-1.0, 0.0, 1.0, 2.0]])
    noise = np.full((1, 4), 0.25)
    assert np.allclose(scale_ratings("posterior_gain", beta), scale_ratings("zscore", beta))
    out = scale_ratings("posterior_gain", beta, noise_var=noise)
    # z-hat = β − 0.5 (signal variance 1), ν = 0.25, λ = 0.8: z ~ N(0.8 z-hat, 0.2)
    for i, zhat in enumerate(beta[0] - 0.5):
        mean, sd = 0.8 * zhat, np.sqrt(0.2)

        def gain(z: float, m: float = mean, s: float = sd) -> float:
            return (2.0 ** (5 * np.clip(0.5 + z / 5, 0, 1)) - 1) * norm.pdf(z, m, s)

        expected, _ = quad(gain, mean - 12 * sd, mean + 12 * sd, limit=200)
        assert out[0, i] == pytest.approx(np.log2(1 + expected), abs=1e-4)  # quadrature


def test_logit_and_anchored_by_hand():
    beta = np.array([[-3.0, 0.0, 3.0, 6.0]])  # centred: −4.5, −1.5, 1.5, 4.5
    np.testing.assert_allclose(scale_ratings("logit", beta), [[0.0, 1.25, 3.75, 5.0]])
    out = scale_ratings("anchored", beta, reference=np.array([1]))
    np.testing.assert_allclose(out, 5 * expit(beta - 0.0))


def test_absent_candidates_stay_nan_and_are_ignored():
    beta = np.array([[0.0, 1.0, np.nan, 2.0]])
    for name in SCALES:
        out = scale_ratings(name, beta, noise_var=np.zeros(beta.shape), reference=np.array([0]))
        assert np.isnan(out[0, 2]) and np.isfinite(out[0, [0, 1, 3]]).all(), name
    np.testing.assert_allclose(scale_ratings("minmax", beta)[0, [0, 1, 3]], [0.0, 2.5, 5.0])


def test_affine_invariance_where_documented():
    rng = np.random.default_rng(1)
    beta = rng.normal(size=(4, 40))
    for name in ("minmax", "quantile", "zscore"):
        np.testing.assert_allclose(
            scale_ratings(name, 3.0 * beta + 7.0), scale_ratings(name, beta), atol=1e-12
        )
    np.testing.assert_allclose(scale_ratings("logit", beta + 7.0), scale_ratings("logit", beta))
    assert not np.allclose(scale_ratings("logit", 3.0 * beta), scale_ratings("logit", beta))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "nope"}, "label scale must be one of"),
        ({"name": "anchored"}, "needs a reference"),
        ({"name": "anchored", "reference": np.array([0, 9])}, "reference of query 1"),
        ({"name": "anchored", "reference": np.array([0, 2])}, "reference of query 1"),
        ({"name": "zscore", "noise_var": -np.ones((2, 3))}, "noise_var of query 0, candidate 0"),
        ({"name": "zscore", "noise_var": np.ones((2, 2))}, "noise_var must be"),
    ],
)
def test_bad_input_names_the_query_and_field(kwargs, message):
    beta = np.array([[0.0, 1.0, 2.0], [0.0, 1.0, np.nan]])
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=message):
        scale_ratings(name, beta, **kwargs)
    with pytest.raises(ValueError, match="query 0 contain"):
        scale_ratings("minmax", np.array([[np.inf, 0.0]]))
    with pytest.raises(ValueError, match="quantile_low"):
        ScaleParams(quantile_low=0.9, quantile_high=0.1)


def test_noise_variance_by_hand_and_equal_to_the_studys():
    from saber_core.rating.comparisons import Comparisons
    from saber_core.rating.noise import strength_noise_variance
    from saber_study.label_budget.bt import sandwich_variance

    # one query, candidates 0, 1, 2: games 0–1 (twice, one dropped) and 1–2
    rows = Comparisons([0, 0, 0], [0, 0, 1], [1, 1, 2], [1.0, np.nan, 0.0], 1, 3)
    beta = np.array([[0.5, 0.0, -0.5]])
    w = expit(0.5) * (1 - expit(0.5))  # both played games have |z| = 0.5
    info = np.array([[w, 2 * w, w]])
    np.testing.assert_allclose(strength_noise_variance(rows, beta), info / (1 + info) ** 2)
    np.testing.assert_allclose(
        strength_noise_variance(rows, beta, C=2.0), 2 * info / (1 + 2 * info) ** 2
    )
    a, b = np.array([[0, 1]]), np.array([[1, 2]])
    np.testing.assert_allclose(sandwich_variance(beta, a, b, np.array([2])), info / (1 + info) ** 2)
    with pytest.raises(ValueError, match="do not match"):
        strength_noise_variance(rows, np.zeros((1, 4)))
