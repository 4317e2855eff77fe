"""Cheap-judge triage: partition property, hand examples, calibration."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import expit

from saber_core.validity.triage import (
    TriageSplit,
    calibrate_margin,
    triage_by_bands,
    triage_by_probability,
)


def assert_partition(split: TriageSplit, n: int) -> None:
    """Every pair goes to exactly one path."""
    assert split.n_pairs == n
    assert np.intersect1d(split.cheap, split.llm).size == 0
    np.testing.assert_array_equal(np.union1d(split.cheap, split.llm), np.arange(n))
    assert len(split.cheap) + len(split.llm) == n
    assert np.all(np.diff(split.cheap) > 0) and np.all(np.diff(split.llm) > 0)
    assert len(split.cheap_outcome) == len(split.cheap)


@pytest.mark.parametrize("threshold", [0.0, 0.1, 0.25, 0.4, 0.5, 0.7])
@pytest.mark.parametrize("soft", [False, True])
def test_probability_triage_is_a_partition(threshold, soft):
    rng = np.random.default_rng(int(threshold * 10))
    p = rng.random(500)
    p[::17] = np.nan
    p[::23] = 0.5
    p[::29] = 0.0
    split = triage_by_probability(p, threshold, soft=soft)
    assert_partition(split, 500)
    with np.errstate(invalid="ignore"):
        expected = np.flatnonzero(np.isfinite(p) & (np.abs(p - 0.5) >= threshold))
    np.testing.assert_array_equal(split.cheap, expected)
    assert not np.isnan(p[split.cheap]).any()  # NaN never skips the LLM


def test_probability_triage_hand_example_and_merge():
    split = triage_by_probability(np.array([0.9, 0.5, 0.1, np.nan, 0.7]), 0.3)
    np.testing.assert_array_equal(split.cheap, [0, 2])
    np.testing.assert_array_equal(split.llm, [1, 3, 4])
    np.testing.assert_array_equal(split.cheap_outcome, [1.0, 0.0])
    assert split.saved_fraction == pytest.approx(0.4)
    np.testing.assert_array_equal(split.merge([0.0, 1.0, 1.0]), [1.0, 0.0, 0.0, 1.0, 1.0])
    soft = triage_by_probability(np.array([0.9, 0.5]), 0.3, soft=True)
    np.testing.assert_allclose(soft.cheap_outcome, [0.9])
    with pytest.raises(ValueError, match="LLM outcomes"):
        split.merge([1.0])
    with pytest.raises(ValueError, match="threshold"):
        triage_by_probability(np.array([0.5]), -0.1)
    empty = triage_by_probability(np.zeros(0), 0.2)
    assert_partition(empty, 0)
    assert empty.saved_fraction == 0.0


def test_band_triage_hand_example():
    a = np.array([2.0, 0.2, 1.0, 1.6, 0.1, np.nan, 1.5, 0.49])
    b = np.array([0.1, 1.7, 0.1, 1.9, 0.3, 0.0, 0.5, 1.5])
    split = triage_by_bands(a, b)
    # decided only when one is >= 1.5 and the other < 0.5 (0.5 itself is uncertain)
    np.testing.assert_array_equal(split.cheap, [0, 1, 7])
    np.testing.assert_array_equal(split.cheap_outcome, [1.0, 0.0, 0.0])
    assert_partition(split, 8)
    with pytest.raises(ValueError, match="low"):
        triage_by_bands(a, b, low=2.0, high=1.0)


def test_band_triage_is_a_partition_on_random_scores():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 2, 1000), rng.uniform(0, 2, 1000)
    a[::13] = np.nan
    split = triage_by_bands(a, b)
    assert_partition(split, 1000)
    assert 0 < len(split.cheap) < 1000


def test_calibrate_margin_matches_a_generic_optimizer():
    rng = np.random.default_rng(1)
    m = rng.normal(0, 2, 3000)
    y = (rng.random(3000) < expit(0.7 * m)).astype(float)
    ref = minimize_scalar(
        lambda k: -np.sum(y * k * m - np.logaddexp(0, k * m)),
        bounds=(0, 10),
        method="bounded",
        options={"xatol": 1e-10},
    ).x
    assert calibrate_margin(m, y) == pytest.approx(ref, rel=1e-6)
    assert calibrate_margin(m, 1.0 - y) == 0.0  # anti-predictive margin: no confidence
    assert calibrate_margin(np.zeros(0), np.zeros(0)) == 0.0
    soft = calibrate_margin(m, expit(0.7 * m))  # soft outcomes recover the slope exactly
    assert soft == pytest.approx(0.7, rel=1e-6)
    assert calibrate_margin(np.array([1.0, -1.0, 2.0]), np.array([1.0, 0.0, 1.0])) > 20


def test_triage_replay_extremes_and_a_direct_recomputation():
    from scipy.special import expit

    from saber_core.rating.bradley_terry import fit_bradley_terry
    from saber_core.rating.comparisons import Comparisons
    from saber_core.tournament.swiss import run_swiss
    from saber_core.validity.reliability import kendall_tau_b
    from saber_core.validity.triage import calibrate_margin, triage_replay

    rng = np.random.default_rng(2)
    truth = rng.normal(0, 1.5, (4, 16))
    cheap = truth + rng.normal(0, 0.5, truth.shape)
    noise = rng.logistic(size=(40, 4, 8))
    q = np.arange(4)[:, None]

    def judge(r, pairs):
        return (truth[q, pairs[..., 0]] - truth[q, pairs[..., 1]] + noise[r] > 0).astype(float)

    result = run_swiss(4, 16, 6, judge, seed=1)
    played: Comparisons = result.comparisons()
    first = result.rounds_of_rows() == 0
    table, k = triage_replay(played, first, cheap, [0.0, 0.25, 0.6], C=1.0)
    margin = cheap[played.q, played.a] - cheap[played.q, played.b]
    assert k == calibrate_margin(margin[first], played.y[first])
    saved = dict(zip(table["threshold"], table["llm_calls_saved"], strict=True))
    assert saved[0.0] == 1.0 and saved[0.6] == 0.0  # everything cheap / everything to the LLM
    p = expit(k * margin)
    confident = np.abs(p - 0.5) >= 0.25
    assert saved[0.25] == confident.mean()
    merged = np.where(confident, (p > 0.5).astype(float), played.y)
    beta = fit_bradley_terry(played.with_outcomes(merged))
    tau = np.nanmean(kendall_tau_b(beta, fit_bradley_terry(played)))
    row = table.filter(table["threshold"] == 0.25).row(0, named=True)
    assert row["tau_to_full_judge"] == pytest.approx(tau)
    assert table.filter(table["threshold"] == 0.6)["tau_to_full_judge"].item() == 1.0
