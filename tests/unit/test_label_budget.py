"""The label-budget study (saber_study.label_budget): its BT solver, pairing, judge, measures
and bookkeeping against independent references."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import kendalltau, ttest_rel

from saber_core.evaluation.metrics import ndcg_at_k
from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import Comparisons
from saber_study.label_budget import bt
from saber_study.label_budget.designs import DesignConfig, Runner
from saber_study.label_budget.measures import (
    bootstrap_intervals,
    bootstrap_weights,
    ndcg10,
    tau_ap,
    top10,
    verdicts,
)
from saber_study.label_budget.pairing import demands, pair_by_demand
from saber_study.label_budget.world import (
    JudgeModel,
    hashed_uniform,
    judge_figures,
    simulate_queries,
)


def random_rows(nq: int, n: int, m: int, seed: int):
    """Random games (repeated pairs allowed) with BT outcomes."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, (nq, m))
    b = (a + rng.integers(1, n, (nq, m))) % n
    s = rng.normal(0, 1.5, (nq, n))
    y = rng.random((nq, m)) < expit(np.take_along_axis(s, a, 1) - np.take_along_axis(s, b, 1))
    return a, b, y.astype(float)


def test_bt_solver_equals_the_builds_fit_cold_and_warm():
    a, b, y = random_rows(12, 30, 120, 0)
    count = np.array([120, 60, 119, 1, 0, 120, 90, 30, 45, 120, 7, 100])
    q = np.concatenate([np.full(c, i) for i, c in enumerate(count)])
    take = np.concatenate([np.arange(c) for c in count])
    rows = Comparisons(q, a[q, take], b[q, take], y[q, take], 12, 30)
    expected = fit_bradley_terry(rows, C=1.0)
    np.testing.assert_allclose(bt.fit(a, b, y, count, 30), expected, atol=1e-7)
    start = bt.fit(a, b, y, count // 2, 30)
    np.testing.assert_allclose(bt.fit(a, b, y, count, 30, start=start), expected, atol=1e-7)
    np.testing.assert_allclose(
        bt.fit(a, b, y, count, 30, C=0.3), fit_bradley_terry(rows, C=0.3), atol=1e-7
    )


def test_information_and_sandwich_by_brute_force():
    a, b, _ = random_rows(2, 6, 15, 1)
    count = np.array([15, 9])
    beta = np.random.default_rng(2).normal(size=(2, 6))
    info = np.zeros((2, 6))
    for q in range(2):
        for r in range(count[q]):
            p = expit(beta[q, a[q, r]] - beta[q, b[q, r]])
            info[q, a[q, r]] += 0.5 * p * (1 - p)
            info[q, b[q, r]] += 0.5 * p * (1 - p)
    np.testing.assert_allclose(bt.information(beta, a, b, count, C=0.5), info)
    np.testing.assert_allclose(
        bt.sandwich_variance(beta, a, b, count, C=0.5), info / (1 + info) ** 2
    )


def test_demands_sum_cap_and_follow_priorities():
    pri = np.array([[8.0, 4.0, 2.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
    order = np.arange(8)[None]
    d = demands(pri, order, games=8, background=0.0, cap=3, offset=np.array([0.5]))
    # shares 8/16, 4/16, … → expected games 4, 2, 1, ½, ½ → capped at 3, the excess 1 spread
    # over the others in proportion: 3, 2.5, 1.25, 0.625, 0.625; systematic rounding from ½:
    # floor(cumsum + ½) = 3, 6, 7, 7, 8 → 3, 3, 1, 0, 1
    assert d.tolist() == [[3, 3, 1, 0, 1, 0, 0, 0]]
    flat = demands(np.zeros((1, 8)), order, 8, 0.0, 3, np.array([0.3]))
    assert flat.tolist() == [[1] * 8]  # no priorities: one game each
    mixed = demands(pri, order, 8, 1.0, 3, np.array([0.0]))
    assert mixed.tolist() == [[1] * 8]  # all background


def test_pair_by_demand_by_hand_and_rules():
    order = np.array([[3, 1, 0, 2, 5, 4]])
    met = np.zeros((1, 6, 6), dtype=np.int16)
    met[0, 3, 1] = met[0, 1, 3] = 2  # 3 has met 1 twice, so it takes 0 (met least, 2 away)
    pairs = pair_by_demand(order, np.ones((1, 6), dtype=np.int64), met, window=8, max_pairs=3)
    assert sorted(map(tuple, pairs[0].tolist())) == [(0, 3), (1, 2), (4, 5)]
    rng = np.random.default_rng(3)
    order = np.argsort(rng.random((20, 30)), axis=1)
    want = rng.integers(0, 4, (20, 30))
    met = rng.integers(0, 3, (20, 30, 30)).astype(np.int16)
    pairs = pair_by_demand(order, want, met, window=4, max_pairs=60)
    for q in range(20):
        got = pairs[q][pairs[q, :, 0] >= 0]
        assert (got[:, 0] < got[:, 1]).all()
        assert len({tuple(p) for p in got.tolist()}) == len(got)  # no pair twice in a round
        played = np.bincount(got.ravel(), minlength=30)
        assert (played <= want[q]).all()


def test_judge_call_by_hand_and_common_random_numbers():
    model = JudgeModel(pair_noise=0.0, call_noise=0.0, intransitivity=0.0, bias_peak=0.8)
    w = simulate_queries(0, np.arange(3), 12, model)
    q = np.repeat(np.arange(3), 66)
    a, b = (np.tile(x, 3) for x in np.triu_indices(12, 1))
    gap = w.strengths[q, a] - w.strengths[q, b]
    bias = 0.8 * np.exp(-np.abs(gap))
    k = np.zeros(len(q), dtype=np.int64)
    np.testing.assert_array_equal(w.call(q, a, b, k, np.ones(len(q), bool)), gap + bias > 0)
    np.testing.assert_array_equal(w.call(q, a, b, k, np.zeros(len(q), bool)), gap - bias > 0)
    noisy = simulate_queries(0, np.arange(3), 12, JudgeModel())
    first = noisy.call(q, a, b, k, np.ones(len(q), bool))
    np.testing.assert_array_equal(first, noisy.call(q, a, b, k, np.ones(len(q), bool)))
    assert (first != noisy.call(q, a, b, k + 1, np.ones(len(q), bool))).any()  # a new call
    u = hashed_uniform(7, 3, np.arange(10_000))
    assert 0 < u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    same = simulate_queries(0, np.arange(1, 3), 12, JudgeModel())  # chunking does not matter
    np.testing.assert_array_equal(same.strengths, noisy.strengths[1:])
    np.testing.assert_array_equal(same.scores, noisy.scores[:, 1:])


def test_judge_figures_match_the_model():
    clean = judge_figures(
        0, 40, 30, JudgeModel(pair_noise=0, call_noise=0, bias_peak=0, intransitivity=0)
    )
    assert clean["accuracy_random_pairs"] == 1.0 and clean["test_retest_agreement"] == 1.0
    noisy = judge_figures(0, 40, 30, JudgeModel())
    assert 0.7 < noisy["accuracy_random_pairs"] < 0.86
    assert noisy["first_answer_share_close_pairs"] > noisy["first_answer_share"] > 0.5


def test_ndcg10_equals_the_core_metric():
    rng = np.random.default_rng(4)
    labels = rng.random((7, 25)) * 5
    scores = rng.normal(size=(3, 7, 25))
    out = ndcg10(labels, top10(scores))
    for r in range(3):
        np.testing.assert_allclose(out[r], ndcg_at_k(scores[r], labels, 10))
    assert ndcg10(np.zeros((1, 12)), top10(scores[:1, :1, :12])).tolist() == [[0.0]]


def test_tau_ap_by_hand_and_extremes():
    # labels' order a, b, c; truth a > c > b: τ_AP = 2/2 (1/1 + 1/2) − 1 = 0.5 (τ = 1/3)
    assert tau_ap(np.array([[3.0, 2.0, 1.0]]), np.array([[3.0, 1.0, 2.0]]))[0] == pytest.approx(0.5)
    # a swap at the top costs more than one at the bottom
    top = tau_ap(np.array([[3.0, 4.0, 2.0, 1.0]]), np.array([[4.0, 3.0, 2.0, 1.0]]))[0]
    bottom = tau_ap(np.array([[4.0, 3.0, 1.0, 2.0]]), np.array([[4.0, 3.0, 2.0, 1.0]]))[0]
    assert top < bottom
    x = np.random.default_rng(5).random((2, 9))
    np.testing.assert_allclose(tau_ap(x, x), 1.0)
    np.testing.assert_allclose(tau_ap(x, -x), -1.0)
    assert kendalltau([3, 2, 1], [3, 1, 2]).statistic == pytest.approx(1 / 3)


def test_verdicts_equal_scipys_paired_t_test():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 5, 80)) * 0.2 + np.array([0.0, 0.02, 0.05, 0.3, 0.31])[None, :, None]
    v, diff = verdicts(x)
    i, j = np.triu_indices(5, 1)
    for c in range(2):
        for p, (r, s) in enumerate(zip(i, j, strict=True)):
            res = ttest_rel(x[c, r], x[c, s])
            want = np.sign(res.statistic) if res.pvalue < 0.05 else 0.0
            assert v[c, p] == want and diff[c, p] == pytest.approx(x[c, r].mean() - x[c, s].mean())


def test_bootstrap_intervals_equal_a_direct_loop():
    values = np.random.default_rng(7).random((2, 3, 50))
    w = bootstrap_weights(50, 200, 1)
    idx = np.random.default_rng(1).integers(0, 50, (200, 50))
    means = values[..., idx].mean(axis=-1)  # (2, 3, 200)
    want = np.stack(np.percentile(means, [2.5, 97.5], axis=-1), axis=-1)
    np.testing.assert_allclose(bootstrap_intervals(values, w), want, atol=1e-6)


def small_config(**kw) -> DesignConfig:
    return replace(DesignConfig(budgets=(60, 100), top_k=12), **kw)


@pytest.mark.parametrize("design", ["swiss", "adaptive", "metric_aware", "pointwise_top"])
def test_designs_reach_every_budget_with_exact_prefixes(design):
    w = simulate_queries(0, np.arange(4), 40, JudgeModel())
    runner = Runner(w, design, "seeded_random", small_config())
    fits = runner.run()
    assert set(fits) == {60, 100}
    assert (runner.p.calls >= 100).all()
    for budget, (beta, noise) in fits.items():
        assert beta.shape == (4, 40) and (noise >= 0).all()
        rows = runner.p.rows_at_calls[budget]
        graded = 40 if design == "pointwise_top" else 0  # grade calls, up to two rows each
        extra = (w.grades >= 1).sum(1) + (w.grades <= 3).sum(1) if graded else 0
        np.testing.assert_array_equal(rows - extra, budget - graded)
        players = runner.players
        again = bt.fit(runner.p.a, runner.p.b, runner.p.y, rows, players)[:, :40]
        np.testing.assert_allclose(beta, again, atol=1e-7)


def test_focused_designs_share_the_swiss_warmup():
    """Common random numbers: before the warm-up ends, adaptive designs are Swiss, call for call."""
    w = simulate_queries(0, np.arange(3), 40, JudgeModel())
    cfg = small_config(budgets=(60, 80), warmup=4)  # 4 rounds × 20 calls = 80
    swiss = Runner(w, "swiss", "pool_order", cfg).run()
    for design in ("adaptive", "metric_aware"):
        other = Runner(w, design, "pool_order", cfg).run()
        np.testing.assert_allclose(other[80][0], swiss[80][0])
