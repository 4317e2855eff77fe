"""Leaderboard stability against hand-computed nDCG@k."""

from __future__ import annotations

import numpy as np
import pytest

from saber_core.validity.leaderboard_stability import leaderboard, leaderboard_stability


def test_leaderboard_stability_by_hand():
    """One query, three candidates, k = 1: nDCG@1 = gain of the retriever's top / best gain."""
    scores = np.array([[[3.0, 2.0, 1.0]], [[1.0, 3.0, 2.0]], [[1.0, 2.0, 3.0]]])  # R = 3
    labels = np.array([[2.0, 1.0, 0.0]])
    reference = np.array([[1.0, 2.0, 0.0]])
    g = lambda x: 2.0**x - 1.0  # noqa: E731
    own = [1.0, g(1) / g(2), 0.0]
    ref = [g(1) / g(2), 1.0, 0.0]
    np.testing.assert_allclose(leaderboard(scores, labels, k=1), own)
    got = leaderboard_stability(scores, labels, reference, k=1)
    np.testing.assert_allclose(got.reference_ndcg, ref)
    # retrievers 0 and 1 swap places, 2 stays last: τ = (2 − 1) / 3
    assert got.tau == pytest.approx(1 / 3)
    np.testing.assert_allclose(got.abs_error, np.abs(np.array(own) - ref))
    assert got.mean_abs_error == pytest.approx(np.mean(np.abs(np.array(own) - ref)))
    assert got.max_abs_error == pytest.approx(1 - 1 / 3)


def test_identical_labels_give_tau_one_and_no_error():
    rng = np.random.default_rng(0)
    scores, labels = rng.random((4, 5, 8)), rng.random((5, 8)) * 5
    got = leaderboard_stability(scores, labels, labels)
    assert got.tau == 1.0 and got.max_abs_error == 0.0
