"""Triage counted again for the build tests: the pairs the band rule decides (one candidate's
grade at or above ``high``, the other's below ``low``) and the judge calls the tournament paid."""

import polars as pl

PAIR = ["query_id", "round", "cand_a", "cand_b"]


def band_decided(judgments: pl.DataFrame, grades: pl.DataFrame, low: float, high: float) -> set:
    """The (query, round, cand_a, cand_b) rows of ``judgments`` the band rule decides."""
    score = {(q, d): g for q, d, g in grades.select("query_id", "doc_id", "score").rows()}
    decided = set()
    for q, r, a, b in judgments.select(PAIR).rows():
        ga, gb = score[(q, a)], score[(q, b)]
        if (ga >= high and gb < low) or (gb >= high and ga < low):
            decided.add((q, r, a, b))
    return decided


def paid_judge_calls(store) -> int:
    """Judge calls paid by the whole build (the tournament and the validity report's round
    robins, which pay again for a pair triage kept from the judge)."""
    calls = store.query("SELECT count(*) AS n FROM llm_calls WHERE prompt_id LIKE 'judge%'")
    return calls["n"][0]


def tournament_judge_calls(store) -> int:
    """Judge calls the tournament rounds made, as the build counts them per query."""
    return store.read_table("tournament_queries")["judge_calls"].sum()
