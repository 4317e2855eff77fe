"""Rounds as judgment tables: pairing, judging and recording, round by round or in one call."""

import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest

from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.comparisons import PlayedRounds, hard_outcomes
from saber_core.tournament.judgment_table import (
    RoundRules,
    judge_pairs,
    play_round,
    play_tournament,
    rating_table,
    tournament_violations,
)
from saber_core.tournament.pairing import run_pairing


@dataclass
class Verdict:
    p_first: np.ndarray
    raw: list[str]
    drop_reason: list[str | None]
    call_keys: list[str]


def make_texts(n_queries: int, n: int):
    query_ids = [f"q{i}" for i in range(n_queries)]
    docs = np.array([[f"d{i}_{j}" for j in range(n)] for i in range(n_queries)], dtype=object)
    texts = {x: f"text of {x}" for x in [*query_ids, *docs.ravel().tolist()]}
    return query_ids, docs, texts


def strength_judge(calls: list[int]):
    """p(first wins) from the docs' index j: higher j is stronger; j = 3 vs 5 is a tie (0.5)."""

    def judge(queries, first, second):
        calls.append(len(queries))
        ja = np.array([int(t.rsplit("_", 1)[1]) for t in first])
        jb = np.array([int(t.rsplit("_", 1)[1]) for t in second])
        p = 1 / (1 + np.exp(-(ja - jb) / 3.0))
        p[(ja == 3) & (jb == 5)] = 0.5
        return Verdict(p, [f"raw{i}" for i in range(len(p))], [None] * len(p), ["k"] * len(p))

    return judge


def test_judge_pairs_records_every_filled_slot():
    query_ids, docs, texts = make_texts(2, 6)
    pairs = np.full((2, 3, 2), -1)
    pairs[0, 0], pairs[0, 1], pairs[1, 2] = (0, 3), (3, 5), (1, 4)
    calls: list[int] = []
    table = judge_pairs(4, pairs, query_ids, docs, texts, strength_judge(calls), seed=7)
    assert calls == [3]  # one call for the whole round
    assert table.select("query_id", "slot", "pos_a", "pos_b").rows() == [
        ("q0", 0, 0, 3),
        ("q0", 1, 3, 5),
        ("q1", 2, 1, 4),
    ]
    assert table["cand_a"].to_list() == ["d0_0", "d0_3", "d1_1"]
    assert table["round"].to_list() == [4, 4, 4] and table["seed"].to_list() == [7, 7, 7]
    assert table["outcome"].to_list() == [0.0, None, 0.0]  # the tie is dropped
    assert table["winner"].to_list() == ["b", None, "b"]
    want = hashlib.sha256(b"text of q0\x1ftext of d0_0\x1ftext of d0_3").hexdigest()[:16]
    assert table["input_hash"][0] == want


@pytest.mark.parametrize(("pairing", "soft"), [("swiss", False), ("information", True)])
def test_round_by_round_equals_one_call_and_the_core_strategy(pairing, soft):
    query_ids, docs, texts = make_texts(3, 10)
    rules = RoundRules(strategy=pairing, seed=3, soft=soft, n_rounds=4)
    tables = []
    for r in range(1, 5):
        played = PlayedRounds.from_frame(pl.concat(tables) if tables else None, query_ids, 10)
        tables.append(play_round(r, query_ids, docs, texts, played, strength_judge([]), rules))
    whole = play_tournament(query_ids, docs, texts, strength_judge([]), rules)
    by_round = pl.concat(tables)
    assert whole.equals(by_round)
    # the same pairs as the core's run_pairing with the same judge and seed
    judge = strength_judge([])

    def probabilities(r, pairs):
        q, slot = np.nonzero(pairs[..., 0] >= 0)
        a = [f"d{i}_{p}" for i, p in zip(q, pairs[q, slot, 0], strict=True)]
        b = [f"d{i}_{p}" for i, p in zip(q, pairs[q, slot, 1], strict=True)]
        out = np.full(pairs.shape[:2], np.nan)
        out[q, slot] = judge(a, a, b).p_first
        return out

    result = run_pairing(3, 10, 4, probabilities, seed=3, strategy=pairing, soft=soft)
    filled = result.pairs[..., 0] >= 0
    assert by_round.select("pos_a", "pos_b").rows() == [tuple(p) for p in result.pairs[filled]]
    played = PlayedRounds.from_frame(by_round, query_ids, 10)
    np.testing.assert_allclose(result.strengths, fit_bradley_terry(played.comparisons(soft)))
    assert tournament_violations(by_round) == {"double_plays": 0, "rematches": 0, "misordered": 0}


@pytest.mark.parametrize("fixes", [(), ("sit_outs",), ("presentation",)])
def test_published_rounds_one_by_one_equal_the_published_tournament(fixes):
    """The round assets pair each published round on its own; the result equals the published
    driver's whole-tournament loop (itself checked against a port of the authors' code)."""
    from saber_core.tournament.swiss_published import play_published_swiss

    query_ids, docs, texts = make_texts(3, 12)
    rules = RoundRules(
        strategy="published",
        seed=42,
        n_rounds=8,
        sit_outs="sit_outs" in fixes,
        presentation="presentation" in fixes,
    )
    table = play_tournament(query_ids, docs, texts, strength_judge([]), rules)
    judge = strength_judge([])

    def published_judge(r, attempt, matches):
        q, a, b = matches[:, 0], matches[:, 1], matches[:, 2]
        first = [docs[i, x] for i, x in zip(q, a, strict=True)]
        second = [docs[i, x] for i, x in zip(q, b, strict=True)]
        return hard_outcomes(judge(first, first, second).p_first)

    expected = play_published_swiss(
        docs.tolist(),
        published_judge,
        n_rounds=8,
        seed=42,
        sit_outs=rules.sit_outs,
        presentation=rules.presentation,
    )
    filled = expected.pairs[..., 0] >= 0
    _, q, _ = np.nonzero(filled)
    assert table.select("pos_a", "pos_b").rows() == [tuple(p) for p in expected.pairs[filled]]
    assert table["query_id"].to_list() == [query_ids[i] for i in q]
    np.testing.assert_array_equal(
        table["outcome"].fill_null(np.nan).to_numpy(), expected.outcomes[filled]
    )
    assert tournament_violations(table, rules.shown_first)["misordered"] == 0


def test_rating_table_is_the_rescaled_fit_with_games_and_wins():
    query_ids, docs, texts = make_texts(2, 8)
    table = play_tournament(
        query_ids, docs, texts, strength_judge([]), RoundRules(seed=1, n_rounds=3)
    )
    played = PlayedRounds.from_frame(table, query_ids, 8)
    ratings = rating_table(query_ids, docs, played, soft=False, C=1.0)
    beta = fit_bradley_terry(played.comparisons(False))
    np.testing.assert_allclose(ratings["rating"].to_numpy(), rescale_ratings(beta).ravel())
    assert ratings["doc_id"].to_list() == docs.ravel().tolist()
    for row in ratings.iter_rows(named=True):
        mine = table.filter(pl.col("query_id") == row["query_id"])
        played_as = mine.filter(
            (pl.col("cand_a") == row["doc_id"]) | (pl.col("cand_b") == row["doc_id"])
        )
        won = mine.filter(
            ((pl.col("cand_a") == row["doc_id"]) & (pl.col("winner") == "a"))
            | ((pl.col("cand_b") == row["doc_id"]) & (pl.col("winner") == "b"))
        )
        assert row["wins"] == won.height
        assert row["games"] == played_as.filter(pl.col("outcome").is_not_null()).height


def test_tournament_violations_are_counted():
    table = pl.DataFrame(
        {
            "query_id": ["q"] * 4,
            "round": [1, 1, 2, 2],
            "pos_a": [0, 0, 2, 3],
            "pos_b": [1, 2, 1, 0],
        }
    )
    # round 1: candidate 0 plays twice; round 2: (2, 1) and (3, 0) are written larger id first
    assert tournament_violations(table) == {"double_plays": 2, "rematches": 0, "misordered": 2}
    ids = table.with_columns(cand_a=pl.format("d{}", "pos_a"), cand_b=pl.format("d{}", "pos_b"))
    assert tournament_violations(ids, "smaller_id")["misordered"] == 2
    assert tournament_violations(ids, "seeded_random")["misordered"] == 0
    rematch = pl.DataFrame(
        {"query_id": ["q", "q"], "round": [1, 2], "pos_a": [0, 0], "pos_b": [1, 1]}
    )
    assert tournament_violations(rematch)["rematches"] == 2


def hashed_judge():
    """A judge whose verdict on a pair depends on the query and both texts (no position rule)."""

    def judge(queries, first, second):
        def p(q, a, b):
            return int(hashlib.sha256(f"{q}|{a}|{b}".encode()).hexdigest()[:6], 16) / 0xFFFFFF

        probs = np.array([p(q, a, b) for q, a, b in zip(queries, first, second, strict=True)])
        n = len(probs)
        return Verdict(probs, ["r"] * n, [None] * n, ["k"] * n)

    return judge


@pytest.mark.parametrize(
    "rules",
    [
        RoundRules(strategy="swiss", seed=5, n_rounds=4),
        RoundRules(strategy="swiss", seed=5, n_rounds=4, order="seeded_random"),
        RoundRules(strategy="information", seed=5, soft=True, n_rounds=4),
        RoundRules(strategy="adaptive", seed=5, n_rounds=4, order="seeded_random"),
        RoundRules(strategy="published", seed=42, n_rounds=4),
        RoundRules(strategy="published", seed=42, n_rounds=4, presentation=True, sit_outs=True),
    ],
    ids=["swiss", "swiss-random-order", "information", "adaptive", "published", "published-fixed"],
)
def test_a_replay_of_some_queries_plays_them_exactly_as_the_whole_tournament(rules):
    """Every draw is made for the whole tournament and the replay keeps its rows: the replayed
    queries' pairs, order shown and verdicts equal the whole tournament's (the audit's control
    rests on this); without the rows the draws shift and the pairs differ."""
    from saber_core.tournament.rows import Rows

    query_ids, docs, texts = make_texts(7, 10)
    whole = play_tournament(query_ids, docs, texts, hashed_judge(), rules)
    keep = np.array([1, 4, 6])
    ids = [query_ids[i] for i in keep]
    columns = ["query_id", "round", "pos_a", "pos_b", "p_a"]
    expected = whole.filter(pl.col("query_id").is_in(ids)).select(columns).sort(columns[:4])
    replay = play_tournament(ids, docs[keep], texts, hashed_judge(), rules, rows=Rows(keep, 7))
    assert replay.select(columns).sort(columns[:4]).equals(expected)
    naive = play_tournament(ids, docs[keep], texts, hashed_judge(), rules)
    assert not naive.select(columns).sort(columns[:4]).equals(expected)
