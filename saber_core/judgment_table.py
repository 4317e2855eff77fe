"""Tournament rounds as judgment tables: pair, judge, record — shared by the build's round
assets, the recipe tournament and the validity round robins.

A judge is any callable ``judge(queries, first, second) -> verdicts`` over aligned lists of
texts whose result has ``p_first`` (P(first wins), NaN = dropped), ``raw``, ``drop_reason`` and
``call_keys`` (:class:`Verdicts`). A judgments table has one row per judged pair::

    query_id, round, slot, pos_a, pos_b, cand_a, cand_b, outcome, winner, p_a, raw,
    drop_reason, call_keys, input_hash, seed

``pos_a < pos_b`` are pool positions (``cand_a``/``cand_b`` their doc ids; ``a`` is shown
first), ``outcome`` = 1.0 if ``a`` won, 0.0 if ``b`` won, null if dropped (p = ½ or no answer),
``winner`` = ``"a"``/``"b"``/null, ``input_hash`` = sha256 of the three texts (query, first,
second) joined by U+001F.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np
import polars as pl

from saber_core.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.comparisons import PlayedRounds, hard_outcomes
from saber_core.pairing import AdaptiveResult, pair_round, round_rng, run_pairing


class Verdicts(Protocol):
    """What a judge returns for aligned (query, first, second) triples."""

    p_first: np.ndarray
    raw: list[str]
    drop_reason: list[str | None]
    call_keys: list[str]


TextJudge = Callable[[list[str], list[str], list[str]], Verdicts]


def input_hash(*texts: str) -> str:
    """sha256 (first 16 hex) of the texts joined by U+001F: what a judgment saw."""
    return hashlib.sha256("\x1f".join(texts).encode()).hexdigest()[:16]


def judge_pairs(
    round_no: int,
    pairs: np.ndarray,
    query_ids: Sequence[str],
    docs: np.ndarray,
    texts: Mapping[str, str],
    judge: TextJudge,
    seed: int,
) -> pl.DataFrame:
    """Judge the filled slots of one round's ``pairs`` (Q, m, 2) (``-1`` = empty slot) and
    return them as a judgments table (module docstring); ``docs`` (Q, n) holds each query's
    pool doc ids by position, ``texts`` the text shown for every id."""
    q_idx, slot = np.nonzero(pairs[..., 0] >= 0)
    pos_a, pos_b = pairs[q_idx, slot, 0], pairs[q_idx, slot, 1]
    qids = [query_ids[i] for i in q_idx]
    cand_a = [docs[i, p] for i, p in zip(q_idx, pos_a, strict=True)]
    cand_b = [docs[i, p] for i, p in zip(q_idx, pos_b, strict=True)]
    shown = [texts[q] for q in qids], [texts[d] for d in cand_a], [texts[d] for d in cand_b]
    verdict = judge(*shown)
    outcome = hard_outcomes(verdict.p_first)
    return pl.DataFrame(
        {
            "query_id": pl.Series(qids, dtype=pl.String),
            "round": pl.Series(np.full(len(q_idx), round_no), dtype=pl.Int64),
            "slot": pl.Series(slot, dtype=pl.Int64),
            "pos_a": pl.Series(pos_a, dtype=pl.Int64),
            "pos_b": pl.Series(pos_b, dtype=pl.Int64),
            "cand_a": pl.Series(cand_a, dtype=pl.String),
            "cand_b": pl.Series(cand_b, dtype=pl.String),
            "outcome": pl.Series(outcome, dtype=pl.Float64),
            "winner": pl.Series([{1.0: "a", 0.0: "b"}.get(o) for o in outcome], dtype=pl.String),
            "p_a": pl.Series(np.asarray(verdict.p_first, dtype=float), dtype=pl.Float64),
            "raw": pl.Series(list(verdict.raw), dtype=pl.String),
            "drop_reason": pl.Series(list(verdict.drop_reason), dtype=pl.String),
            "call_keys": pl.Series(list(verdict.call_keys), dtype=pl.String),
            "input_hash": pl.Series([input_hash(*t) for t in zip(*shown, strict=True)]),
            "seed": pl.Series(np.full(len(q_idx), seed), dtype=pl.Int64),
        }
    ).with_columns(pl.col("outcome", "p_a").fill_nan(None))


def play_round(
    round_no: int,
    query_ids: Sequence[str],
    docs: np.ndarray,
    texts: Mapping[str, str],
    played: PlayedRounds,
    judge: TextJudge,
    *,
    seed: int,
    pairing: str = "swiss",
    soft: bool = False,
    C: float = 1.0,
) -> pl.DataFrame:
    """Round ``round_no`` (1-based) of every query's tournament, given the earlier rounds
    ``played``: pair with :func:`saber_core.pairing.pair_round` (generator ``round_rng(seed,
    round_no)``), judge, and return its judgments table."""
    wins, met = played.standings()
    history = played.comparisons(soft)
    pairs = pair_round(pairing, wins, met, history, round_rng(seed, round_no), C=C)
    return judge_pairs(round_no, pairs, query_ids, docs, texts, judge, seed)


def play_tournament(
    query_ids: Sequence[str],
    docs: np.ndarray,
    texts: Mapping[str, str],
    rounds: int,
    judge: TextJudge,
    *,
    seed: int,
    pairing: str = "swiss",
    soft: bool = False,
    C: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> tuple[AdaptiveResult, pl.DataFrame]:
    """A whole tournament in one call (:func:`saber_core.pairing.run_pairing`, so its pairs
    equal those of :func:`play_round` played round by round); returns the result (strengths
    fitted as played) and all judgments as one table."""
    tables: list[pl.DataFrame] = []

    def judge_round(r: int, pairs: np.ndarray) -> np.ndarray:
        table = judge_pairs(r + 1, pairs, query_ids, docs, texts, judge, seed)
        tables.append(table)
        if log:
            log(f"round {r + 1}/{rounds}: {table.height} pairs")
        out = np.full(pairs.shape[:2], np.nan)
        filled = np.nonzero(pairs[..., 0] >= 0)
        out[filled] = table["p_a"].fill_null(np.nan).to_numpy()
        return out

    result = run_pairing(
        len(query_ids),
        docs.shape[1],
        rounds,
        judge_round,
        seed=seed,
        strategy=pairing,
        soft=soft,
        C=C,
    )
    return result, pl.concat(tables) if tables else pl.DataFrame()


def rating_table(
    query_ids: Sequence[str], docs: np.ndarray, played: PlayedRounds, soft: bool, C: float
) -> pl.DataFrame:
    """Bradley–Terry ratings of every pool candidate: ``query_id, position, doc_id, strength,
    rating`` (min–max to [0, 5] per query), ``games`` (decided) and Swiss ``wins``."""
    comparisons = played.comparisons(soft)
    beta = fit_bradley_terry(comparisons, C=C)
    wins, _ = played.standings()
    nq, n = docs.shape
    return pl.DataFrame(
        {
            "query_id": np.repeat(np.asarray(query_ids, dtype=object), n),
            "position": np.tile(np.arange(n), nq),
            "doc_id": docs.ravel(),
            "strength": beta.ravel(),
            "rating": rescale_ratings(beta).ravel(),
            "games": comparisons.games().ravel().astype(np.int64),
            "wins": wins.ravel(),
        },
        schema_overrides={"query_id": pl.String, "doc_id": pl.String},
    )


def tournament_violations(table: pl.DataFrame) -> dict[str, int]:
    """Rule violations of a judgments table: a candidate playing twice in a round
    (``double_plays``), a pair meeting twice (``rematches``), ``pos_a ≥ pos_b``
    (``misordered``)."""
    plays = pl.concat(
        [table.select("query_id", "round", pl.col(c).alias("pos")) for c in ("pos_a", "pos_b")]
    )
    return {
        "double_plays": plays.filter(pl.struct("query_id", "round", "pos").is_duplicated()).height,
        "rematches": table.filter(pl.struct("query_id", "pos_a", "pos_b").is_duplicated()).height,
        "misordered": table.filter(pl.col("pos_a") >= pl.col("pos_b")).height,
    }
