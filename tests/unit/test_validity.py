"""Agreement, split-half reliability, bootstrap intervals and recipe-sensitivity helpers."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import kendalltau, spearmanr

from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.comparisons import Comparisons
from saber_core.validity.reliability import (
    bootstrap_intervals,
    judgment_agreement,
    kendall_tau_b,
    mean_and_se,
    pairwise_agreement,
    pool_overlap,
    resample_comparisons,
    shared_rank_correlation,
    spearman_brown,
    spearman_rho,
    split_half_reliability,
)


# ----------------------------------------------------------------------------- references
def ref_agreement(x: np.ndarray, y: np.ndarray) -> float:
    """Brute force: concordant or both tied 1, discordant 0, tied in one only ½."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    scores = []
    for i, j in combinations(range(len(x)), 2):
        sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        scores.append(1.0 if sx == sy else (0.0 if sx * sy < 0 else 0.5))
    return float(np.mean(scores))


def design(seed: int, nq: int, n: int, m: int, sd: float = 1.0):
    """Random fixed design: m random pairs per query, hard outcomes from BT with strengths s."""
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, sd, (nq, n))
    q = np.repeat(np.arange(nq), m)
    a = rng.integers(0, n, nq * m)
    b = (a + rng.integers(1, n, nq * m)) % n
    p = expit(s[q, a] - s[q, b])
    y = (rng.random(len(p)) < p).astype(float)
    return s, q, a, b, p, y


# ----------------------------------------------------------------------------- agreement
def test_tau_and_agreement_hand_examples():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])
    assert kendall_tau_b(x, y) == pytest.approx(1 / 3)
    assert pairwise_agreement(x, y) == pytest.approx(2 / 3)
    # ties: pairs (0,1) tied in x only -> ½, (0,2) and (1,2) concordant
    x, y = np.array([1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    assert pairwise_agreement(x, y) == pytest.approx(2.5 / 3)
    assert kendall_tau_b(x, y) == pytest.approx(2 / np.sqrt(2 * 3))
    # tied in both counts as agreement
    assert pairwise_agreement(np.array([1.0, 1.0]), np.array([5.0, 5.0])) == 1.0
    assert np.isnan(kendall_tau_b(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])))


def test_tau_matches_scipy_and_agreement_matches_brute_force():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, (9, 13)).astype(float)
    y = rng.integers(0, 4, (9, 13)).astype(float)
    tau = kendall_tau_b(x, y)
    agree = pairwise_agreement(x, y)
    assert tau.shape == agree.shape == (9,)
    for i in range(9):
        assert tau[i] == pytest.approx(kendalltau(x[i], y[i])[0])
        assert agree[i] == pytest.approx(ref_agreement(x[i], y[i]))
    # without ties: agreement = (1 + tau) / 2
    x, y = rng.normal(size=(5, 30)), rng.normal(size=(5, 30))
    np.testing.assert_allclose(pairwise_agreement(x, y), (1 + kendall_tau_b(x, y)) / 2)


def test_nan_candidates_are_left_out():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=12), rng.normal(size=12)
    x_nan = x.copy()
    x_nan[[3, 7]] = np.nan
    keep = np.isfinite(x_nan)
    assert kendall_tau_b(x_nan, y) == pytest.approx(kendall_tau_b(x[keep], y[keep]))
    assert pairwise_agreement(x_nan, y) == pytest.approx(ref_agreement(x_nan, y))


def test_spearman_matches_scipy_and_needs_finite():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 5, (4, 20)).astype(float)
    y = rng.normal(size=(4, 20))
    for i, r in enumerate(spearman_rho(x, y)):
        assert r == pytest.approx(spearmanr(x[i], y[i])[0])
    with pytest.raises(ValueError, match="finite"):
        spearman_rho(np.array([1.0, np.nan]), np.array([1.0, 2.0]))


def test_judgment_agreement_hand_example():
    ratings = np.array([[3.0, 1.0, 1.0], [0.0, 1.0, 2.0]])
    q = np.array([0, 0, 0, 1, 1])
    a = np.array([0, 1, 0, 0, 1])
    b = np.array([1, 2, 2, 2, 2])
    out = np.array([1.0, 1.0, 0.0, np.nan, 0.2])
    # query 0: agree (1), rating tie (½), disagree (0); query 1: NaN skipped, b wins and is higher
    np.testing.assert_allclose(
        judgment_agreement(ratings, Comparisons(q, a, b, out, 2, 3)), [0.5, 1.0]
    )


def test_mean_and_se():
    assert mean_and_se(np.array([1.0, 2.0, 3.0, np.nan])) == pytest.approx((2.0, 1 / np.sqrt(3)))
    assert np.isnan(mean_and_se(np.array([np.nan]))[0])


# ----------------------------------------------------------------------------- split-half
def test_spearman_brown():
    np.testing.assert_allclose(spearman_brown(np.array([0.5, 1.0, 0.0, -0.4])), [2 / 3, 1, 0, 0])
    assert np.isnan(spearman_brown(np.nan))


def test_split_half_separates_signal_from_noise():
    _, q, a, b, _, y = design(3, nq=6, n=15, m=600, sd=2.0)
    strong = split_half_reliability(Comparisons(q, a, b, y, 6, 15), n_repeats=3, seed=0)
    assert strong.half_r.shape == (6, 3)
    assert strong.mean == pytest.approx(spearman_brown(np.nanmean(strong.half_r)))
    assert strong.mean > 0.85 and np.all(strong.per_query > 0.7)
    coin = (np.random.default_rng(9).random(len(q)) < 0.5).astype(float)
    noise = split_half_reliability(Comparisons(q, a, b, coin, 6, 15), n_repeats=5, seed=0)
    assert noise.mean < 0.5
    again = split_half_reliability(Comparisons(q, a, b, y, 6, 15), n_repeats=3, seed=0)
    np.testing.assert_array_equal(again.half_r, strong.half_r)
    other = split_half_reliability(Comparisons(q, a, b, y, 6, 15), n_repeats=3, seed=1)
    assert not np.array_equal(other.half_r, strong.half_r)


# ----------------------------------------------------------------------------- bootstrap
def test_resample_keeps_queries_and_counts():
    _, q, a, b, _, y = design(4, nq=3, n=8, m=20)
    y[:5] = np.nan  # dropped judgments are not resampled
    boot = resample_comparisons(Comparisons(q, a, b, y, 3, 8), 4, seed=0)
    rq, ra, rb, ry = boot.q, boot.a, boot.b, boot.y
    assert boot.n_queries == 12
    counts = np.bincount(q[np.isfinite(y)], minlength=3)
    np.testing.assert_array_equal(np.bincount(rq, minlength=12), np.tile(counts, 4))
    assert np.isfinite(ry).all()
    original = {(int(qq), int(x), int(z)) for qq, x, z in zip(q, a, b, strict=True)}
    assert all((int(k) % 3, int(x), int(z)) in original for k, x, z in zip(rq, ra, rb, strict=True))


def test_bootstrap_shapes_scale_and_reproducibility():
    _, q, a, b, _, y = design(5, nq=4, n=10, m=150)
    bi = bootstrap_intervals(Comparisons(q, a, b, y, 4, 10), n_boot=50, seed=3)
    assert bi.replicates.shape == (50, 4, 10)
    np.testing.assert_allclose(bi.strength, fit_bradley_terry(Comparisons(q, a, b, y, 4, 10)))
    np.testing.assert_allclose(bi.rating, rescale_ratings(bi.strength))
    assert np.all(bi.strength_lower <= bi.strength_upper)
    # rating interval = strength interval under the point estimate's affine map
    lo, hi = bi.strength.min(1, keepdims=True), bi.strength.max(1, keepdims=True)
    np.testing.assert_allclose(bi.rating_lower, 5 * (bi.strength_lower - lo) / (hi - lo))
    np.testing.assert_allclose(bi.rating_upper, 5 * (bi.strength_upper - lo) / (hi - lo))
    same = bootstrap_intervals(Comparisons(q, a, b, y, 4, 10), n_boot=50, seed=3)
    np.testing.assert_array_equal(same.strength_lower, bi.strength_lower)
    # per-query streams: blocking and the other queries in the call change nothing
    blocked = bootstrap_intervals(
        Comparisons(q, a, b, y, 4, 10), n_boot=50, seed=3, block_queries=1, keep_replicates=False
    )
    np.testing.assert_allclose(blocked.strength_upper, bi.strength_upper)
    assert blocked.replicates.shape == (0, 4, 10)
    sel = q >= 2
    tail = bootstrap_intervals(
        Comparisons(q[sel] - 2, a[sel], b[sel], y[sel], 2, 10), n_boot=50, seed=3, query_keys=[2, 3]
    )
    np.testing.assert_allclose(tail.strength_lower, bi.strength_lower[2:])
    other = bootstrap_intervals(Comparisons(q, a, b, y, 4, 10), n_boot=50, seed=4)
    assert not np.allclose(other.strength_lower, bi.strength_lower)


def test_bootstrap_covers_the_estimand_at_about_the_nominal_rate():
    """95% percentile intervals vs the estimand of the L2 fit (C = 1): BT on the same pairs with
    the true probabilities as soft outcomes (raw true strengths are shrunk, so not the target).
    """
    _, q, a, b, p, y = design(0, nq=30, n=20, m=400)
    bi = bootstrap_intervals(Comparisons(q, a, b, y, 30, 20), n_boot=150, seed=1)
    estimand = fit_bradley_terry(Comparisons(q, a, b, p, 30, 20))
    coverage = np.mean((bi.strength_lower <= estimand) & (estimand <= bi.strength_upper))
    assert 0.90 <= coverage <= 0.99  # measured 0.92-0.94 over data seeds 0-5
    # A 50% interval (same replicates) covers about half as often: the level drives coverage.
    lower, upper = np.quantile(bi.replicates, [0.25, 0.75], axis=0)
    narrow = np.mean((lower <= estimand) & (estimand <= upper))
    assert 0.38 <= narrow <= 0.62


def test_bootstrap_rejects_bad_arguments():
    _, q, a, b, _, y = design(6, nq=1, n=5, m=10)
    with pytest.raises(ValueError, match="level"):
        bootstrap_intervals(Comparisons(q, a, b, y, 1, 5), level=1.0)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_intervals(Comparisons(q, a, b, y, 1, 5), n_boot=1)


# ----------------------------------------------------------------------------- recipe audit
def test_pool_overlap_hand():
    out = pool_overlap([["a", "b", "c"], ["x", "x"], []], [["b", "c", "d"], ["y"], []])
    np.testing.assert_allclose(out, [2 / 4, 0.0, 1.0])
    with pytest.raises(ValueError):
        pool_overlap([["a"]], [])


def test_shared_rank_correlation_hand():
    res = shared_rank_correlation(
        [["a", "b", "c", "d"], ["a", "b", "c"], ["a", "b"]],
        [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0], [1.0, 2.0]],
        [["d", "c", "b", "x"], ["c", "b", "a"], ["b", "z"]],
        [[4.0, 3.0, 2.0, 0.0], [1.0, 2.0, 3.0], [5.0, 1.0]],
    )
    np.testing.assert_array_equal(res.n_shared, [3, 3, 1])
    np.testing.assert_allclose(res.spearman[:2], [1.0, -1.0])
    np.testing.assert_allclose(res.kendall[:2], [1.0, -1.0])
    assert np.isnan(res.spearman[2]) and np.isnan(res.kendall[2])
    with pytest.raises(ValueError, match="unique"):
        shared_rank_correlation([["a", "a"]], [[1.0, 2.0]], [["a"]], [[1.0]])


def test_recipe_agreement_hand_example():
    from saber_core.validity.reliability import recipe_agreement

    out = recipe_agreement(
        ["q1", "q2"],
        [["a", "b", "c", "d"], ["x", "y"]],
        [[4.0, 3.0, 2.0, 1.0], [1.0, 2.0]],
        [["d", "c", "b", "e"], ["z", "w"]],
        [[0.0, 1.0, 5.0, 2.0], [1.0, 1.0]],
    )
    first = out.row(0, named=True)
    assert first["pool_overlap"] == pytest.approx(3 / 5) and first["n_shared"] == 3
    # shared b, c, d: own ratings 3, 2, 1; other 5, 1, 0 → the same order
    assert first["spearman"] == pytest.approx(1.0) and first["kendall_tau"] == pytest.approx(1.0)
    second = out.row(1, named=True)
    assert second["pool_overlap"] == 0.0 and second["n_shared"] == 0
    assert second["spearman"] is None and second["kendall_tau"] is None


def test_sample_subset_is_seeded_and_keeps_order():
    from saber_core.validity.reliability import sample_subset

    items = [f"q{i}" for i in range(10)]
    pick = np.sort(np.random.default_rng([3, 9]).choice(10, size=4, replace=False))
    assert sample_subset(items, 4, seed=3, stream=9) == [items[i] for i in pick]
    assert sample_subset(items, 0, seed=3, stream=9) == items
    assert sample_subset(items, 20, seed=3, stream=9) == items
