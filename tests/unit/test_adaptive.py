"""Top-focused adaptive tournament: posterior pieces by hand, the round rules, replay."""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy.special import expit

from saber_core.rating.comparisons import Comparisons
from saber_core.tournament.adaptive import (
    AdaptiveRule,
    adaptive_round,
    gain_spread,
    laplace_covariance,
    posterior_draws,
    self_ndcg,
)
from saber_core.tournament.judgment_table import query_budget
from saber_core.tournament.pairing import round_rng, run_pairing
from saber_core.tournament.swiss import swiss_round


def test_laplace_covariance_by_hand():
    """One game 0 beats 1 at β = (0.3, −0.3), C = 2: H = I + 2 w [[1, −1], [−1, 1]]."""
    beta = np.array([[0.3, -0.3]])
    rows = Comparisons([0], [0], [1], [1.0], 1, 2)
    w = 2 * expit(0.6) * (1 - expit(0.6))
    hess = np.array([[1 + w, -w], [-w, 1 + w]])
    np.testing.assert_allclose(laplace_covariance(rows, beta, C=2.0)[0], np.linalg.inv(hess))


def test_laplace_covariance_ignores_dropped_rows():
    beta = np.zeros((1, 3))
    rows = Comparisons([0, 0], [0, 1], [1, 2], [np.nan, np.nan], 1, 3)
    np.testing.assert_allclose(laplace_covariance(rows, beta, C=1.0)[0], np.eye(3))


def test_posterior_draws_have_the_covariance():
    cov = np.array([[[2.0, 0.5], [0.5, 1.0]]])
    z = np.random.default_rng(0).standard_normal((200_000, 2))
    d = posterior_draws(np.array([[1.0, -1.0]]), cov, z)[0]
    np.testing.assert_allclose(d.mean(axis=0), [1.0, -1.0], atol=0.02)
    np.testing.assert_allclose(np.cov(d.T), cov[0], atol=0.03)


def test_gain_spread_by_hand():
    """Two draws rate a candidate 0 and 5: gains 2^0 and 2^5, std = 15.5, / 31 = ½; a
    candidate rated 3 in both draws has no spread."""
    ratings = np.array([[[0.0, 3.0], [5.0, 3.0]]])  # (Q=1, D=2, n=2)
    np.testing.assert_allclose(gain_spread(ratings), [[0.5, 0.0]])


def test_self_ndcg_is_one_when_every_draw_agrees_and_lower_when_the_top_swaps():
    beta = np.array([[3.0, 2.0, 1.0]])
    agree = np.array([[[5.0, 2.0, 0.0]] * 4])
    assert self_ndcg(beta, agree, k=1)[0] == 1.0
    swapped = np.array([[[5.0, 2.0, 0.0], [2.0, 5.0, 0.0]]])  # half the draws swap the top
    expected = 0.5 * 1.0 + 0.5 * (2**2 - 1) / (2**5 - 1)
    np.testing.assert_allclose(self_ndcg(beta, swapped, k=1), [expected])


def chain_history(n: int, rounds: int, rng: np.random.Generator):
    """Swiss rounds judged by the true order (smaller position is stronger)."""
    wins, met = np.zeros((1, n)), np.zeros((1, n, n), dtype=bool)
    rows = []
    for _ in range(rounds):
        pairs = swiss_round(wins, met, rng)[0]
        for a, b in pairs[pairs[:, 0] >= 0]:
            met[0, a, b] = met[0, b, a] = True
            wins[0, min(a, b)] += 1
            rows.append((a, b, float(a < b)))
    a, b, y = (np.array(c) for c in zip(*rows, strict=True))
    return wins, met, Comparisons(np.zeros(len(a), np.int64), a, b, y, 1, n)


def test_warmup_rounds_are_swiss_rounds():
    wins, met = np.zeros((2, 10)), np.zeros((2, 10, 10), dtype=bool)
    plan = adaptive_round(
        2, wins, met, Comparisons.empty(2, 10), round_rng(5, 2), AdaptiveRule(), 5
    )
    np.testing.assert_array_equal(plan.pairs, swiss_round(wins, met, round_rng(5, 2)))
    assert plan.status.tolist() == ["warmup", "warmup"]


def test_adaptive_round_plays_only_heavy_unmet_pairs_near_the_top():
    n = 30
    wins, met, history = chain_history(n, 4, np.random.default_rng(1))
    rule = AdaptiveRule(warmup=4, stop_ndcg=1.01, min_weight=0.05)  # never stable
    plan = adaptive_round(5, wins, met, history, round_rng(0, 5), rule, seed=0)
    played = plan.pairs[0][plan.pairs[0, :, 0] >= 0]
    assert plan.status.tolist() == ["playing"]
    assert 0 < len(played) < n // 2  # fewer pairs than a full round
    assert len(set(played.ravel().tolist())) == 2 * len(played)  # at most one game each
    assert not met[0, played[:, 0], played[:, 1]].any()  # no rematch
    assert played.min(axis=1).mean() < n / 2  # the games go to the upper half
    assert (plan.pairs[0, len(played) :] == -1).all()  # filled slots first


def test_a_stable_query_stops_and_stays_stopped():
    n = 12
    wins, met, history = chain_history(n, 6, np.random.default_rng(2))
    rule = AdaptiveRule(warmup=2, stop_ndcg=0.0)  # every query is stable at once
    plan = adaptive_round(7, wins, met, history, round_rng(0, 7), rule, seed=0)
    assert plan.status.tolist() == ["stable"] and (plan.pairs == -1).all()

    def judge(_r, pairs):
        return np.where(pairs[..., 0] >= 0, (pairs[..., 0] < pairs[..., 1]) * 0.9 + 0.05, np.nan)

    res = run_pairing(3, 20, 10, judge, seed=4, strategy="adaptive", rule=AdaptiveRule(warmup=3))
    again = run_pairing(3, 20, 10, judge, seed=4, strategy="adaptive", rule=AdaptiveRule(warmup=3))
    np.testing.assert_array_equal(res.pairs, again.pairs)  # replayable
    assert (res.status[:3] == "warmup").all()
    assert (res.status[-1] == "stable").all()  # a consistent judge: every query stops in time
    for q in range(3):
        col = res.status[:, q].tolist()
        if "stable" in col:  # once stopped, no more games
            first = col.index("stable")
            assert set(col[first:]) == {"stable"}
            assert (res.pairs[first:, q] == -1).all()


def test_query_budget_by_hand():
    status = pl.DataFrame(
        {
            "query_id": ["a", "a", "a", "b", "b", "b"],
            "round": [1, 2, 3, 1, 2, 3],
            "status": ["warmup", "playing", "stable", "warmup", "playing", "playing"],
            "n_pairs": [5, 3, 0, 5, 4, 2],
        }
    )
    got = query_budget(status, calls_per_pair=2)
    assert got.rows() == [("a", 8, 16, 3, "stable"), ("b", 11, 22, None, "max_rounds")]
