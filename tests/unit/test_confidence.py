"""Paired bootstrap intervals and rank stability: brute-force loops and hand-enumerated cases."""

import itertools

import numpy as np
import pytest

from saber_core.evaluation.confidence import (
    bootstrap_indices,
    bootstrap_means,
    confidence,
    flip_share,
    percentile_intervals,
    top_share,
)


def test_bootstrap_means_equal_a_loop_and_are_paired():
    rng = np.random.default_rng(0)
    values = rng.random((3, 17))
    indices = bootstrap_indices(17, 2500, seed=5)  # > one chunk
    assert indices.shape == (2500, 17) and indices.min() >= 0 and indices.max() <= 16
    means = bootstrap_means(values, indices)
    for b in (0, 999, 1000, 2499):
        for r in range(3):
            assert means[b, r] == pytest.approx(np.mean([values[r, j] for j in indices[b]]))
    # the same seed draws the same resamples: one system alone gets the same column
    alone = bootstrap_means(values[1:2], bootstrap_indices(17, 2500, seed=5))
    assert alone[:, 0] == pytest.approx(means[:, 1], abs=1e-14)
    assert not np.array_equal(bootstrap_indices(17, 50, 5), bootstrap_indices(17, 50, 6))


def test_percentile_intervals_match_numpy_percentile():
    means = np.random.default_rng(1).random((1000, 2))
    intervals = percentile_intervals(means, 0.05)
    for r in range(2):
        assert intervals[r].tolist() == pytest.approx(np.percentile(means[:, r], [2.5, 97.5]))


def test_flip_and_top_share_on_all_resamples_of_two_queries():
    # a = [1, 0], b = [0, 1]: the four resamples (0,0), (0,1), (1,0), (1,1) by hand
    values = np.array([[1.0, 0.0], [0.0, 1.0]])
    indices = np.array(list(itertools.product([0, 1], repeat=2)))
    means = bootstrap_means(values, indices)
    assert means.tolist() == [[1.0, 0.0], [0.5, 0.5], [0.5, 0.5], [0.0, 1.0]]
    # b beats a once and ties twice: (1 + ½·2) / 4
    assert flip_share(means, 0, 1) == 0.5
    # a is best once alone and twice shared: (1 + ½ + ½) / 4
    assert top_share(means, 0) == 0.5
    three = np.array([[1.0, 1.0, 0.0]])
    assert top_share(three, 0) == pytest.approx(0.5) and top_share(three, 2) == 0.0


def test_confidence_orders_pairs_and_is_seeded():
    rng = np.random.default_rng(3)
    base = rng.random(40)
    values = np.vstack([base, base + 0.2, base + 0.01 + rng.normal(0, 0.05, 40)])
    result = confidence(values, n_resamples=2000, seed=11)
    assert result.order.tolist() == [1, 2, 0]
    strong, weak = result.pairs
    assert (strong.upper, strong.lower, strong.rank) == (1, 2, 1)
    assert strong.flip_share == 0.0 and not strong.overlap  # +0.2 on every query
    assert (weak.upper, weak.lower) == (2, 0)
    lo, hi = result.intervals[2], result.intervals[0]
    assert weak.overlap == bool(lo[0] <= hi[1] and hi[0] <= lo[1])
    assert weak.difference == pytest.approx(values[2].mean() - values[0].mean())
    assert result.top_stays == 1.0
    for r in range(3):
        assert result.intervals[r, 0] <= values[r].mean() <= result.intervals[r, 1]
    again = confidence(values, n_resamples=2000, seed=11)
    assert np.array_equal(again.intervals, result.intervals)
    assert not np.array_equal(confidence(values, 2000, seed=12).intervals, result.intervals)
    with pytest.raises(ValueError):
        confidence(np.array([[np.nan, 1.0]]))
