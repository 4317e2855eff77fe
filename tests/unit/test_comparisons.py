"""Comparisons and PlayedRounds: the flat pairwise rows every tournament and fit shares."""

import numpy as np
import polars as pl
import pytest

from saber_core.rating.comparisons import Comparisons, PlayedRounds, hard_outcomes


def test_hard_outcomes_hand_values():
    np.testing.assert_array_equal(
        hard_outcomes([0.9, 0.1, 0.5, np.nan, 1.0, 0.0]), [1.0, 0.0, np.nan, np.nan, 1.0, 0.0]
    )


def test_rows_are_coerced_and_lengths_checked():
    rows = Comparisons([0, 1], [0, 2], [1, 3], [1, 0.25], 2, 4)
    assert rows.q.dtype == np.int64 and rows.y.dtype == np.float64 and len(rows) == 2
    with pytest.raises(ValueError, match="one entry per row"):
        Comparisons([0, 1], [0], [1, 2], [1.0, 0.0], 2, 4)


def test_select_concat_and_outcomes():
    rows = Comparisons([0, 0, 1], [0, 1, 2], [1, 2, 3], [1.0, np.nan, 0.0], 2, 4)
    np.testing.assert_array_equal(rows.decided, [True, False, True])
    kept = rows.select(rows.decided)
    assert kept.q.tolist() == [0, 1] and (kept.n_queries, kept.n_players) == (2, 4)
    both = Comparisons.concat([rows, kept])
    assert both.a.tolist() == [0, 1, 2, 0, 2]
    assert rows.with_outcomes([0.5, 0.5, 0.5]).y.tolist() == [0.5] * 3
    with pytest.raises(ValueError, match="different sizes"):
        Comparisons.concat([rows, Comparisons.empty(3, 4)])


def test_games_count_decided_games_per_candidate():
    rng = np.random.default_rng(0)
    q, a = rng.integers(0, 3, 50), rng.integers(0, 5, 50)
    b = (a + rng.integers(1, 5, 50)) % 5
    y = np.where(rng.random(50) < 0.2, np.nan, rng.random(50))
    games = Comparisons(q, a, b, y, 3, 5).games()
    expected = np.zeros((3, 5))
    for qq, aa, bb, yy in zip(q, a, b, y, strict=True):
        if not np.isnan(yy):
            expected[qq, aa] += 1
            expected[qq, bb] += 1
    np.testing.assert_array_equal(games, expected)


def test_played_rounds_from_a_table_standings_and_both_outcome_kinds():
    table = pl.DataFrame(
        {
            "query_id": ["q2", "q1", "q2", "q1"],
            "pos_a": [0, 1, 1, 0],
            "pos_b": [2, 3, 2, 1],
            "outcome": [1.0, 0.0, None, 1.0],
            "p_a": [0.8, 0.3, 0.5, None],
        }
    )
    played = PlayedRounds.from_frame(table, ["q1", "q2"], 4)
    assert played.q.tolist() == [1, 0, 1, 0]  # row order kept, query index from the id list
    wins, met = played.standings()
    expected_wins = np.zeros((2, 4))
    expected_wins[1, 0] = 1  # q2: 0 beat 2
    expected_wins[0, 3] = 1  # q1: 3 beat 1 (outcome 0 → b won)
    expected_wins[0, 0] = 1  # q1: 0 beat 1
    np.testing.assert_array_equal(wins, expected_wins)
    assert met[1, 1, 2] and met[1, 2, 1]  # a dropped judgment still counts as met
    assert met.sum() == 2 * 4
    hard = played.comparisons(soft=False)
    np.testing.assert_array_equal(hard.y, [1.0, 0.0, np.nan, 1.0])
    soft = played.comparisons(soft=True)
    np.testing.assert_array_equal(soft.y, [0.8, 0.3, np.nan, np.nan])  # NaN where hard is NaN
    empty = PlayedRounds.from_frame(None, ["q1"], 4)
    assert len(empty.comparisons(False)) == 0 and empty.standings()[0].shape == (1, 4)
