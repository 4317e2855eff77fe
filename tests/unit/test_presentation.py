"""Presentation orders and the position-bias measures, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from saber_core.tournament.presentation import (
    calls_per_pair,
    first_answer_share,
    group_bias,
    present,
    presentation_flips,
)


def test_flips_are_seeded_and_skip_empty_slots():
    pairs = np.array([[[0, 1], [2, 3], [-1, -1]]] * 200)
    flips = presentation_flips(7, 3, pairs)
    np.testing.assert_array_equal(flips, presentation_flips(7, 3, pairs))
    u = np.random.default_rng([7, 12, 3]).random((200, 3))
    np.testing.assert_array_equal(flips[:, :2], u[:, :2] < 0.5)
    assert not flips[:, 2].any()
    assert 0.4 < flips[:, :2].mean() < 0.6
    assert not np.array_equal(flips, presentation_flips(7, 4, pairs))  # another round


def test_present_swaps_only_flipped_pairs():
    pairs = np.array([[[0, 1], [2, 3]]])
    shown = present(pairs, np.array([[True, False]]))
    assert shown.tolist() == [[[1, 0], [2, 3]]]


def test_calls_per_pair():
    assert [calls_per_pair(p) for p in ("pool_order", "both_orders", "seeded_random")] == [1, 2, 1]
    with pytest.raises(ValueError, match="presentation"):
        calls_per_pair("smaller_id")


def test_first_answer_share_ignores_dropped():
    assert first_answer_share(np.array([1.0, 1.0, 0.0, np.nan])) == pytest.approx(2 / 3)
    assert np.isnan(first_answer_share(np.array([np.nan])))


def test_group_bias_by_hand():
    """Query 1: errors (+1, +1, 0, 0) → 1; query 2: errors (0, 0, 0, +2) → −1; mean 0 …"""
    ref = np.zeros((2, 4))
    ratings = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    assert group_bias(ratings, ref) == pytest.approx(0.0)
    assert group_bias(ratings[:1], ref[:1]) == pytest.approx(1.0)
    assert group_bias(ratings + 3.0, ref) == pytest.approx(0.0)  # a common shift is no bias
