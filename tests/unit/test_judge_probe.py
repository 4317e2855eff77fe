"""The judge probe's pure parts: Wilson intervals, gaps, the stratified sample, the figures."""

import math

import numpy as np
import pytest

from saber_core.validity.judge_probe import (
    gap_bins,
    logprob_signal,
    probe_figures,
    retest_counts,
    standardized_gap,
    stratified_sample,
    swap_counts,
    wilson_interval,
)


def test_wilson_interval_hand_computed():
    # 8 of 10, z = 1.96: centre 0.8 + z²/20, half z·√(0.016 + z²/400), over 1 + z²/10
    z2 = 1.959963984540054**2
    centre, half = 0.8 + z2 / 20, 1.959963984540054 * math.sqrt(0.016 + z2 / 400)
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx((centre - half) / (1 + z2 / 10))
    assert hi == pytest.approx((centre + half) / (1 + z2 / 10))
    assert (round(lo, 3), round(hi, 3)) == (0.490, 0.943)  # the textbook value
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(20, 20)[1] == 1.0
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_standardized_gap_uses_the_pool_spread():
    gap = standardized_gap(np.array([0.9, 0.5]), np.array([0.5, 0.5]), np.array([0.2, 0.0]), 1.5)
    assert gap.tolist() == pytest.approx([1.5 * 0.4 / 0.2, 0.0])


def test_gap_bins_are_quantiles_of_the_absolute_gap():
    gap = np.array([-4.0, 0.1, 0.2, -0.3, 1.0, 2.0, 3.0, 0.0])
    edges, idx = gap_bins(gap, 4)
    assert edges[0] == 0.0 and edges[-1] == 4.0
    assert idx.tolist() == [3, 0, 1, 1, 2, 2, 3, 0]  # |gap| sorted: 0 .1 | .2 .3 | 1 2 | 3 4


def test_stratified_sample_takes_equal_shares_and_refills_short_bins():
    bins = np.array([0] * 50 + [1] * 3 + [2] * 50)
    got = stratified_sample(bins, 30, seed=4)
    assert len(got) == 30 and len(set(got.tolist())) == 30
    counts = np.bincount(bins[got], minlength=3)
    assert counts[1] == 3 and counts[0] + counts[2] == 27 and abs(counts[0] - counts[2]) <= 1
    assert stratified_sample(bins, 30, seed=4).tolist() == got.tolist()
    assert stratified_sample(bins, 30, seed=5).tolist() != got.tolist()
    assert len(stratified_sample(bins, 500, seed=0)) == len(bins)  # more than there are: all


# pair, a_first, repeat, a_wins for two pairs (a hand-made probe)
CALLS = np.array(
    [
        # pair 0: a first → a, a; b first → a, b
        (0, 1, 0, 1.0), (0, 1, 1, 1.0), (0, 0, 0, 1.0), (0, 0, 1, 0.0),
        # pair 1: a first → b, dropped; b first → b, b
        (1, 1, 0, 0.0), (1, 1, 1, np.nan), (1, 0, 0, 0.0), (1, 0, 1, 0.0),
    ]
)  # fmt: skip


def _cols():
    return CALLS[:, 0].astype(int), CALLS[:, 1].astype(bool), CALLS[:, 2].astype(int), CALLS[:, 3]


def test_retest_and_swap_counts_by_hand():
    pair, a_first, repeat, y = _cols()
    # retest: (0, a first) agree, (0, b first) disagree, (1, a first) dropped, (1, b first) agree
    assert retest_counts(pair, a_first, repeat, y) == (2, 3)
    # swap: pair 0 rep 0 a|a same, rep 1 a|b differ; pair 1 rep 0 b|b same, rep 1 dropped
    assert swap_counts(pair, a_first, repeat, y) == (2, 3)


def test_probe_figures_by_hand():
    pair, a_first, repeat, y = _cols()
    gap = np.where(pair == 0, 0.2, 2.0)
    f = probe_figures(pair, a_first, repeat, y, gap, pair, None)
    assert (f["n_pairs"], f["n_calls"], f["n_dropped"]) == (2, 8, 1)
    # the first shown won: pair 0 → 1, 1 (a first, a won), 0, 1 (b first: a won, b won);
    # pair 1 → 0 (a first, b won), 1, 1 (b first, b won): 5 of 7 answered calls
    assert (f["first_answer_share"]["k"], f["first_answer_share"]["n"]) == (5, 7)
    assert (f["a_wins"]["k"], f["a_wins"]["n"]) == (3, 7)
    b0, b1 = f["by_gap_bin"]
    assert (b0["first_answer_share"]["k"], b0["a_wins"]["k"], b0["mean_gap"]) == (3, 3, 0.2)
    assert (b1["first_answer_share"]["k"], b1["a_wins"]["k"], b1["n_pairs"]) == (2, 0, 1)
    assert "logprob_signal" not in f


def test_logprob_signal_reads_the_order_debiased_probability():
    n = 12
    gap = np.linspace(0, 3, n)
    pair = np.r_[np.arange(n), np.arange(n)]
    a_first = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    # a position bias of +0.3 on whoever is first plus a content term rising with the gap
    content = 0.02 * np.arange(n)
    p_first = np.r_[0.5 + 0.3 + content, 0.5 + 0.3 - content]
    s = logprob_signal(pair, a_first, p_first, np.r_[gap, gap])
    assert s["spearman"] == pytest.approx(1.0) and s["n"] == n
    flat = logprob_signal(pair, a_first, np.full(2 * n, 0.8), np.r_[gap, gap])
    assert math.isnan(flat["spearman"])  # pure position bias: no signal to rank
