"""The study's budget curves: the presented judge by hand, the curve's bookkeeping."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from saber_core.tournament.presentation import presentation_flips
from saber_study.budget import budget_curves, holds_from, presented_judge, round_robin_ratings
from saber_study.simulation import StudyConfig, simulate_judge


def test_presented_judge_by_hand():
    """Noise 0, bias b: shown (f, g) the judge says σ(s_f − s_g + b)."""
    b = 0.7
    judge = simulate_judge(40, 6, strength_sd=1.0, judge_noise=0.0, position_bias=b, seed=3)
    s = judge.strengths
    pairs = np.tile(np.array([[0, 1], [2, 3], [-1, -1]]), (40, 1, 1))
    d = np.stack([s[:, 0] - s[:, 1], s[:, 2] - s[:, 3]], axis=1)
    answers: list[np.ndarray] = []
    pool = presented_judge(judge, "pool_order", 5, answers)(0, pairs)
    np.testing.assert_allclose(pool[:, :2], expit(d + b))
    assert np.isnan(pool[:, 2]).all()
    np.testing.assert_array_equal(answers[0], (d + b > 0).ravel().astype(float))
    both = presented_judge(judge, "both_orders", 5, [])(0, pairs)
    np.testing.assert_allclose(both[:, :2], 0.5 * (expit(d + b) + 1 - expit(-d + b)))
    rand = presented_judge(judge, "seeded_random", 5, [])(2, pairs)
    flip = presentation_flips(5, 3, pairs)[:, :2]  # round index 2 = round 3
    assert flip.any() and (~flip).any()
    np.testing.assert_allclose(rand[:, :2], np.where(flip, 1 - expit(-d + b), expit(d + b)))


def test_round_robin_reference_without_noise_orders_by_strength():
    judge = simulate_judge(3, 10, strength_sd=1.5, judge_noise=0.0, position_bias=0.4, seed=1)
    ratings = round_robin_ratings(judge, C=1.0)
    for q in range(3):
        assert (np.argsort(ratings[q]) == np.argsort(judge.strengths[q])).all()


def test_budget_curves_count_calls_and_stops():
    cfg = StudyConfig(
        n_queries=3, n_players=12, n_rounds=6, curve_points=(2, 4, 6), adaptive_warmup=2,
        adaptive_draws=50, retriever_noise=(0.5, 1.0, 2.0),
    )  # fmt: skip
    block = budget_curves(cfg)
    assert block["swiss_budget_calls"] == 36
    rows = {(r["pairing"], r["presentation"]): r for r in block["rows"]}
    assert len(rows) == 9
    swiss = rows[("swiss", "pool_order")]["curve"]
    assert [c["calls_per_query"] for c in swiss] == [12, 24, 36]
    both = rows[("swiss", "both_orders")]["curve"]
    assert [c["calls_per_query"] for c in both] == [24, 48, 72]  # two calls per pair
    adaptive = rows[("adaptive", "pool_order")]
    assert adaptive["curve"][0]["calls_per_query"] == 12  # the warmup is Swiss
    assert all(c["calls_per_query"] <= 36 for c in adaptive["curve"])
    assert sum(adaptive["stop_reasons"].values()) == 3
    for row in rows.values():
        assert 0.0 <= row["first_answer_share"] <= 1.0
        assert all(-1.0 <= c["leaderboard_tau"] <= 1.0 for c in row["curve"])


def test_holds_from_needs_the_target_at_every_later_point():
    curve = [
        {"calls_per_query": 300, "tau": 0.96},
        {"calls_per_query": 600, "tau": 0.90},
        {"calls_per_query": 900, "tau": 0.97},
        {"calls_per_query": 1200, "tau": 0.99},
    ]
    assert holds_from(curve, lambda c: c["tau"] >= 0.95) == 900
    assert holds_from(curve, lambda c: c["tau"] >= 0.5) == 300
    assert holds_from(curve, lambda c: c["tau"] >= 0.995) is None
