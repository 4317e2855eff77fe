"""Pairing strategies: greedy information matching vs a brute-force reference, rules."""

from __future__ import annotations

import numpy as np
import pytest

from saber_core.rating.comparisons import Comparisons
from saber_core.tournament.matching import _strict_ranks, greedy_matching, information_weights
from saber_core.tournament.pairing import (
    AdaptiveResult,
    hard_outcomes,
    information_round,
    plan_round,
    random_round,
    run_pairing,
)


def reference_greedy(rank: np.ndarray, met: np.ndarray) -> list[tuple[int, int]]:
    """Plain greedy on one query: heaviest unmet pair of two free candidates, repeatedly."""
    n = rank.shape[0]
    edges = sorted(
        ((rank[i, j], i, j) for i in range(n) for j in range(i + 1, n) if not met[i, j]),
        reverse=True,
    )
    used: set[int] = set()
    pairs = []
    for _, i, j in edges:
        if i not in used and j not in used:
            pairs.append((i, j))
            used |= {i, j}
    return pairs


def random_met(rng: np.random.Generator, nq: int, n: int, density: float) -> np.ndarray:
    met = np.triu(rng.random((nq, n, n)) < density, k=1)
    return met | met.transpose(0, 2, 1)


@pytest.mark.parametrize("n", [2, 7, 12])
def test_greedy_matching_equals_brute_force_greedy(n):
    rng = np.random.default_rng(n)
    for trial in range(10):
        w = rng.random((8, n, n))
        w = np.round(w + w.transpose(0, 2, 1), 1)  # symmetric, with ties
        met = random_met(rng, 8, n, 0.3)
        pairs = greedy_matching(w, met, np.random.default_rng(trial), repair=False)
        rank = _strict_ranks(w, np.random.default_rng(trial))  # the same tie-break draw
        for q in range(8):
            got = sorted(tuple(int(x) for x in p) for p in pairs[q] if p[0] >= 0)
            assert got == sorted(reference_greedy(rank[q], met[q]))


def test_strict_ranks_follow_the_weights():
    w = np.array([[[0, 3, 1], [3, 0, 2], [1, 2, 0]]], dtype=float)
    rank = _strict_ranks(w, np.random.default_rng(0))
    assert rank[0, 0, 1] > rank[0, 1, 2] > rank[0, 0, 2]
    np.testing.assert_array_equal(rank, rank.transpose(0, 2, 1))
    assert np.all(np.diagonal(rank, axis1=1, axis2=2) == -1)


def test_information_round_pairs_closest_strengths():
    beta = np.array([[0.0, 10.0, 0.1, 10.2, 5.0, 5.05]])
    pairs = information_round(beta, np.zeros((1, 6, 6), dtype=bool), np.random.default_rng(0))
    assert sorted(map(tuple, pairs[0].tolist())) == [(0, 2), (1, 3), (4, 5)]
    w = information_weights(beta)
    assert w[0, 4, 5] == pytest.approx(0.25, abs=1e-3) and w[0, 0, 1] < 1e-4


def test_round_one_is_random_and_seeded():
    met = np.zeros((3, 10, 10), dtype=bool)
    a = random_round(met, np.random.default_rng(1))
    b = random_round(met, np.random.default_rng(1))
    c = information_round(np.zeros((3, 10)), met, np.random.default_rng(2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def fixed_judge(strengths: np.ndarray, seed: int):
    """Probability judge with one fixed noisy perception per pair."""
    rng = np.random.default_rng(seed)
    nq, n = strengths.shape
    eps = np.triu(rng.logistic(size=(nq, n, n)), k=1)
    perception = np.triu(strengths[:, :, None] - strengths[:, None, :], k=1) + eps
    perception = perception - perception.transpose(0, 2, 1)
    q = np.arange(nq)[:, None]

    def judge(_round: int, pairs: np.ndarray) -> np.ndarray:
        a, b = np.maximum(pairs[..., 0], 0), np.maximum(pairs[..., 1], 0)
        return 1.0 / (1.0 + np.exp(-perception[q, a, b]))

    return judge


@pytest.mark.parametrize("strategy", ["swiss", "information", "random"])
@pytest.mark.parametrize("n", [10, 11])
def test_tournament_rules_no_rematch_once_per_round(strategy, n):
    strengths = np.random.default_rng(0).normal(0, 1.5, (5, n))
    rounds = n - 3  # deep enough that left-overs and repairs happen
    res = run_pairing(5, n, rounds, fixed_judge(strengths, 1), seed=3, strategy=strategy)
    assert isinstance(res, AdaptiveResult)
    assert res.pairs.shape == (rounds, 5, n // 2, 2)
    for q in range(5):
        seen: set[tuple[int, int]] = set()
        for r in range(rounds):
            filled = res.pairs[r, q][res.pairs[r, q, :, 0] >= 0]
            assert np.all(res.pairs[r, q][res.pairs[r, q, :, 0] < 0] == -1)
            assert np.all(filled[:, 0] < filled[:, 1])
            players = filled.reshape(-1)
            assert len(set(players.tolist())) == len(players)  # once per round
            pairs = {tuple(p) for p in filled.tolist()}
            assert not pairs & seen  # no rematch
            seen |= pairs
            assert res.byes[r, q] == n - len(players)
    assert (res.byes >= n % 2).all()
    # hard outcomes, wins and the flattening for Bradley–Terry are consistent
    np.testing.assert_array_equal(np.isnan(res.outcomes), np.isnan(hard_outcomes(res.p_first)))
    rows = res.comparisons()
    q, a, b, o = rows.q, rows.a, rows.b, rows.y
    wins = np.zeros((5, n))
    np.add.at(wins, (q[o == 1.0], a[o == 1.0]), 1)
    np.add.at(wins, (q[o == 0.0], b[o == 0.0]), 1)
    np.testing.assert_array_equal(wins, res.wins)


def test_run_pairing_is_reproducible_and_soft_changes_the_path():
    strengths = np.random.default_rng(4).normal(0, 1.5, (3, 16))
    judge = fixed_judge(strengths, 5)
    one = run_pairing(3, 16, 6, judge, seed=7)
    two = run_pairing(3, 16, 6, judge, seed=7)
    soft = run_pairing(3, 16, 6, judge, seed=7, soft=True)
    np.testing.assert_array_equal(one.pairs, two.pairs)
    np.testing.assert_array_equal(one.strengths, two.strengths)
    assert not np.array_equal(one.pairs, soft.pairs)


def test_information_pairs_are_closer_than_random_pairs():
    strengths = np.random.default_rng(6).normal(0, 1.5, (6, 30))
    judge = fixed_judge(strengths, 7)

    def mean_gap(res: AdaptiveResult) -> float:
        late = res.pairs[4:]
        valid = late[..., 0] >= 0
        _, qi, _ = np.nonzero(valid)
        sel = late[valid]
        return float(np.abs(strengths[qi, sel[:, 0]] - strengths[qi, sel[:, 1]]).mean())

    info = run_pairing(6, 30, 10, judge, seed=1)
    rand = run_pairing(6, 30, 10, judge, seed=1, strategy="random")
    assert mean_gap(info) < 0.85 * mean_gap(rand)


def test_bad_inputs():
    with pytest.raises(ValueError, match="strategy"):
        run_pairing(1, 4, 1, lambda r, p: np.zeros((1, 2)), seed=0, strategy="elo")
    with pytest.raises(ValueError, match="pairing"):
        met = np.zeros((1, 4, 4), bool)
        plan_round("elo", 1, np.zeros((1, 4)), met, Comparisons.empty(1, 4), 0)
    with pytest.raises(ValueError, match="shape"):
        run_pairing(1, 4, 1, lambda r, p: np.zeros((1, 3)), seed=0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        run_pairing(1, 4, 1, lambda r, p: np.full((1, 2), 2.0), seed=0)
    with pytest.raises(ValueError, match="weights"):
        greedy_matching(np.zeros((1, 3, 3)), np.zeros((1, 4, 4), bool), np.random.default_rng())


def test_information_pairing_uses_the_history_it_is_given():
    """With a history where 0 ≫ 1 ≫ … (a chain of wins), the heaviest pairs of the next
    information round are nearest unmet neighbours in that order (gap 2, the middle of the
    chain first); a round on an empty history is the seeded random round."""
    n = 8
    chain = np.arange(n - 1)
    history = Comparisons(np.zeros(n - 1, np.int64), chain, chain + 1, np.ones(n - 1), 1, n)
    met = np.zeros((1, n, n), dtype=bool)
    met[0, chain, chain + 1] = met[0, chain + 1, chain] = True
    pairs = plan_round("information", 1, np.zeros((1, n)), met, history, 0).pairs
    gaps = np.abs(pairs[0, :, 0] - pairs[0, :, 1])
    assert gaps[:2].tolist() == [2, 2]  # matched heaviest first
    assert set(pairs[0, 0].tolist()) <= {2, 3, 4, 5}
    empty = Comparisons.empty(1, n)
    no_history = plan_round("information", 1, np.zeros((1, n)), met, empty, 0).pairs
    random = plan_round("random", 1, np.zeros((1, n)), met, empty, 0).pairs
    np.testing.assert_array_equal(no_history, random)
