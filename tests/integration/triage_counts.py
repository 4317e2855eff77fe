"""The band rule of triage counted again from the grades, for the build tests: a pair is decided
when one candidate's grade is at or above ``high`` and the other's below ``low``."""

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
