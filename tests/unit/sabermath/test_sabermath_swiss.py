"""docs/sabermath.md §10: Swiss tournament against a literal port of the published driver
(sabermath_reference.py):
schedule, sit-outs, retries, the 150-position window, the lexicographic Sample-1 rule, and the
two fixes."""

from __future__ import annotations

import zlib
from itertools import combinations

import numpy as np
import pytest
import sabermath_reference as ref

from saber_core.tournament.swiss_published import pair_swiss_round, play_published_swiss


def decide(r: int, attempt: int, target: int, id1: str, id2: str) -> int | None:
    """A deterministic fake judge: 1 or 2, or None (failed) ~20 % of first and ~40 % of retries."""
    h = zlib.crc32(f"{r}|{attempt}|{target}|{id1}|{id2}".encode())
    if h % 100 < (20 if attempt == 0 else 40):
        return None
    return 1 + (h >> 8) % 2


def judge_for(ids: list[list[str]]):
    def judge(r: int, attempt: int, matches: np.ndarray) -> np.ndarray:
        out = []
        for q, s1, s2 in matches.tolist():
            winner = decide(r, attempt, q, ids[q][s1], ids[q][s2])
            out.append(np.nan if winner is None else 1.0 if winner == 1 else 0.0)
        return np.array(out)

    return judge


def random_ids(seed: int, n_queries: int, size: int) -> list[list[str]]:
    """Distinct numeric strings of different lengths, so "10" < "9" matters."""
    rng = np.random.default_rng(seed)
    return [[str(x) for x in rng.choice(2000, size, replace=False)] for _ in range(n_queries)]


@pytest.mark.parametrize(
    ("seed", "n_queries", "size", "rounds", "batch"),
    # small pools for many rounds (sit-outs), odd pools, batches of 2, pools of 150 and 155
    [(42, 5, 8, 7, 2), (3, 3, 9, 6, 200), (1, 4, 30, 20, 3), (2, 2, 150, 20, 1), (7, 2, 155, 2, 1)],
)
def test_schedule_outcomes_and_sit_outs_equal_the_published_driver(
    seed, n_queries, size, rounds, batch
):
    ids = random_ids(seed, n_queries, size)
    schedule, results, idle, scores = ref.swiss(ids, decide, rounds, seed, batch_size=batch)
    got = play_published_swiss(ids, judge_for(ids), n_rounds=rounds, seed=seed, batch_size=batch)
    sat_out_seen = 0
    for (r, t), expected_pairs in schedule.items():
        filled = got.pairs[r, t][got.pairs[r, t, :, 0] >= 0]
        pairs = [(ids[t][a], ids[t][b]) for a, b in filled]
        assert pairs == expected_pairs, (r, t)
        for (a, b), outcome in zip(pairs, got.outcomes[r, t][: len(pairs)], strict=True):
            expected = results.get((r, t, a, b))
            assert (np.isnan(outcome) and expected is None) or outcome == {1: 1.0, 2: 0.0}[expected]
        sat = {ids[t][i] for i in np.flatnonzero(got.sat_out[r, t])}
        assert sat == idle[(r, t)], (r, t)
        sat_out_seen += len(sat)
    for t in range(n_queries):
        assert got.wins[t].tolist() == [scores[t][c] for c in ids[t]]
    assert sat_out_seen > 0  # the rules leave candidates out in these cases
    assert not got.reversed.any()


def test_only_the_first_150_positions_play():
    ids = [[f"c{i:03d}" for i in range(153)]]
    got = play_published_swiss(ids, lambda r, a, m: np.ones(len(m)), n_rounds=1, seed=0)
    assert got.sit_out_counts.tolist() == [[3]]
    assert (got.pairs[0, 0, :, 0] >= 0).sum() == 75


def test_the_lexicographically_smaller_id_is_sample_1():
    ids = [["9", "10"]]
    seen = []

    def judge(r, attempt, matches):
        seen.extend((ids[q][a], ids[q][b]) for q, a, b in matches.tolist())
        return np.ones(len(matches))

    got = play_published_swiss(ids, judge, n_rounds=2, seed=1)
    assert seen == [("10", "9")]  # "10" < "9" as strings; round 2: they have met, both sit out
    assert got.pairs[0, 0].tolist() == [[1, 0]]
    assert got.wins[0].tolist() == [0.0, 1.0]
    assert got.sit_out_counts[:, 0].tolist() == [0, 2]  # no bye point either
    rows = got.comparisons()
    assert (rows.a.tolist(), rows.b.tolist(), rows.y.tolist()) == ([1], [0], [1.0])


def test_presentation_fix_randomizes_the_order_and_keeps_the_schedule():
    ids = random_ids(5, 4, 10)

    def by_id(r, attempt, matches):  # the larger number wins, whatever the order shown
        return np.array([float(int(ids[q][a]) > int(ids[q][b])) for q, a, b in matches.tolist()])

    published = play_published_swiss(ids, by_id, n_rounds=6, seed=9)
    fixed = play_published_swiss(ids, by_id, n_rounds=6, seed=9, presentation=True)
    assert np.array_equal(np.sort(fixed.pairs, axis=-1), np.sort(published.pairs, axis=-1))
    assert np.array_equal(fixed.wins, published.wins)
    filled = fixed.pairs[..., 0] >= 0
    assert 0.3 < fixed.reversed[filled].mean() < 0.7
    q = np.nonzero(filled)[1]
    first, second = fixed.pairs[filled].T
    larger_first = [ids[t][a] > ids[t][b] for t, a, b in zip(q, first, second, strict=True)]
    assert larger_first == fixed.reversed[filled].tolist()
    assert not published.reversed.any()


def test_pair_round_published_sits_out_and_the_fix_repairs_by_a_swap():
    met = np.zeros((6, 6), dtype=bool)
    met[4, 5] = met[5, 4] = True
    order = [0, 1, 2, 3, 4, 5]
    assert pair_swiss_round(order, met) == ([(0, 1), (2, 3)], [4, 5])
    # the nearest earlier pair (2, 3) is split: 4-2 and 5-3 have not met
    assert pair_swiss_round(order, met, sit_outs=True) == ([(0, 1), (4, 2), (5, 3)], [])
    everyone = ~np.eye(4, dtype=bool)
    everyone[0, 1] = everyone[1, 0] = False
    assert pair_swiss_round([2, 0, 3, 1], everyone, sit_outs=True) == ([(0, 1)], [2, 3])


def test_sit_out_fix_leaves_out_only_what_no_swap_can_place():
    ids = random_ids(11, 6, 10)
    got = play_published_swiss(ids, judge_for(ids), n_rounds=9, seed=4, sit_outs=True)
    met = np.zeros((6, 10, 10), dtype=bool)
    for r in range(9):
        for t in range(6):
            pairs = got.pairs[r, t][got.pairs[r, t, :, 0] >= 0]
            players = pairs.ravel().tolist()
            assert len(players) == len(set(players))  # everyone plays at most once
            assert not met[t, pairs[:, 0], pairs[:, 1]].any()  # no rematch
            left = np.flatnonzero(got.sat_out[r, t]).tolist()
            assert sorted(players + left) == list(range(10))
            for p, q in combinations(left, 2):
                for a, b in pairs:
                    straight = not met[t, p, a] and not met[t, q, b]
                    crossed = not met[t, p, b] and not met[t, q, a]
                    assert not (straight or crossed)
            met[t, pairs[:, 0], pairs[:, 1]] = met[t, pairs[:, 1], pairs[:, 0]] = True
    published = play_published_swiss(ids, judge_for(ids), n_rounds=9, seed=4)
    assert published.sit_out_counts.sum() > got.sit_out_counts.sum()


def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match="not a string"):
        play_published_swiss([[1, 2]], lambda r, a, m: np.ones(len(m)))
    with pytest.raises(ValueError, match="repeat"):
        play_published_swiss([["a", "a"]], lambda r, a, m: np.ones(len(m)))
    with pytest.raises(ValueError, match=r"need 1\.0, 0\.0 or NaN"):
        play_published_swiss([["a", "b"]], lambda r, a, m: np.full(len(m), 2.0))
