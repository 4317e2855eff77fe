"""Tournament rounds as judgment tables: pair, judge, record — shared by the build's round
assets, the recipe tournament and the validity round robins.

A judge is any callable ``judge(queries, first, second) -> verdicts`` over aligned lists of
texts whose result has ``p_first`` (P(first wins), NaN = dropped), ``raw``, ``drop_reason`` and
``call_keys`` (:class:`Verdicts`). A judgments table has one row per judged pair::

    query_id, round, slot, pos_a, pos_b, cand_a, cand_b, outcome, winner, p_a, raw,
    drop_reason, call_keys, input_hash, seed, shown_first

``pos_a``, ``pos_b`` are pool positions (``cand_a``/``cand_b`` their doc ids; ``a`` is shown
first; ``pos_a < pos_b`` unless the order is ``seeded_random`` or the published
``smaller_id``), ``outcome`` = 1.0 if ``a`` won, 0.0 if ``b`` won, null if dropped (p = ½ or no
answer), ``winner`` = ``"a"``/``"b"``/null, ``input_hash`` = sha256 of the three texts (query,
first, second) joined by U+001F, ``shown_first`` the presentation rule of the tournament.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import polars as pl

from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.bradley_terry_published import published_strengths, relevance_scores
from saber_core.rating.comparisons import PlayedRounds, hard_outcomes
from saber_core.tournament.adaptive import DEFAULT_RULE, STOPPED, AdaptiveRule, RoundPlan
from saber_core.tournament.pairing import plan_round
from saber_core.tournament.presentation import present, presentation_flips
from saber_core.tournament.rows import Rows
from saber_core.tournament.swiss_published import published_orders, published_round


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
    shown_first: str = "pool_order",
) -> pl.DataFrame:
    """Judge the filled slots of one round's ``pairs`` (Q, m, 2) (``-1`` = empty slot; the
    first position is shown first) and return them as a judgments table (module docstring);
    ``docs`` (Q, n) holds each query's pool doc ids by position, ``texts`` the text shown for
    every id, ``shown_first`` the presentation rule (:attr:`RoundRules.shown_first`)."""
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
            "shown_first": pl.Series([shown_first] * len(q_idx), dtype=pl.String),
        }
    ).with_columns(pl.col("outcome", "p_a").fill_nan(None))


@dataclass(frozen=True)
class RoundRules:
    """How the rounds of a tournament are paired and shown.

    ``strategy``: ``swiss`` / ``information`` / ``random`` / ``adaptive``
    (:func:`saber_core.tournament.pairing.plan_round`) or ``published`` (the published Swiss of
    :mod:`saber_core.tournament.swiss_published`: shuffle, stable sort by wins ascending, greedy in
    the
    first 150 positions, sit-outs; the smaller doc id shown first), with its fixes ``sit_outs``
    and ``presentation``. ``soft``/``C``: the information and adaptive pairings' refit.
    ``n_rounds``: the tournament's length (the published shuffles of every round are drawn in
    driver order). ``order``: the platform strategies' presentation
    (:mod:`saber_core.tournament.presentation`: ``pool_order`` / ``both_orders`` — smaller position
    first, the judge asks the swap itself — or ``seeded_random``). ``rule``: the adaptive
    settings.
    """

    strategy: str = "swiss"
    seed: int = 0
    soft: bool = False
    C: float = 1.0
    n_rounds: int = 1
    sit_outs: bool = False
    presentation: bool = False
    order: str = "pool_order"
    rule: AdaptiveRule = DEFAULT_RULE

    @property
    def shown_first(self) -> str:
        """Which candidate of a pair is shown first: ``pool_order`` (smaller position),
        ``smaller_id`` (smaller doc id as a string) or ``seeded_random``."""
        if self.strategy != "published":
            return "seeded_random" if self.order == "seeded_random" else "pool_order"
        return "seeded_random" if self.presentation else "smaller_id"

    def plan(
        self, round_no: int, played: PlayedRounds, docs: np.ndarray, rows: Rows | None = None
    ) -> RoundPlan:
        """Round ``round_no`` (1-based) of every query: pairs (Q, n // 2, 2) of positions as
        shown (``-1`` = empty slot) and each query's status. ``rows``: these queries are rows
        of a whole tournament (a replay pairs them exactly as it did, :class:`Rows`)."""
        wins, met = played.standings()
        if self.strategy != "published":
            history = played.comparisons(self.soft)
            plan = plan_round(
                self.strategy, round_no, wins, met, history, self.seed, self.C, self.rule, rows
            )
            if self.order != "seeded_random":
                return plan
            flips = presentation_flips(self.seed, round_no, plan.pairs, rows)
            return RoundPlan(present(plan.pairs, flips), plan.status)
        nq, n = docs.shape
        total = rows.total if rows is not None else nq
        orders = published_orders([n] * total, self.n_rounds, self.seed)[round_no - 1]
        index = rows.index.tolist() if rows is not None else list(range(nq))
        pairs = published_round(
            round_no - 1,
            [orders[i] for i in index],
            wins,
            met,
            docs.tolist(),
            seed=self.seed,
            sit_outs=self.sit_outs,
            presentation=self.presentation,
            query_numbers=index,
        ).pairs
        return RoundPlan(pairs, np.full(nq, "playing", dtype=object))


def status_table(round_no: int, query_ids: Sequence[str], plan: RoundPlan) -> pl.DataFrame:
    """One row per query: ``query_id, round, status, n_pairs`` of a planned round."""
    return pl.DataFrame(
        {
            "query_id": pl.Series(list(query_ids), dtype=pl.String),
            "round": pl.Series(np.full(len(query_ids), round_no), dtype=pl.Int64),
            "status": pl.Series(plan.status.tolist(), dtype=pl.String),
            "n_pairs": pl.Series((plan.pairs[..., 0] >= 0).sum(axis=1), dtype=pl.Int64),
        }
    )


def query_budget(status: pl.DataFrame, calls_per_pair: int) -> pl.DataFrame:
    """Per query, from the rounds' :func:`status_table` rows: ``pairs`` judged, ``judge_calls``
    (``pairs · calls_per_pair``), ``stop_round`` (first round whose status is ``stable`` or
    ``exhausted``; null = played every round) and ``stop_reason`` (that status, else
    ``max_rounds``)."""
    stopped = pl.col("status").is_in(list(STOPPED))
    return (
        status.sort("query_id", "round")
        .group_by("query_id", maintain_order=True)
        .agg(
            pl.col("n_pairs").sum().alias("pairs"),
            pl.col("round").filter(stopped).first().alias("stop_round"),
            pl.col("status").filter(stopped).first().fill_null("max_rounds").alias("stop_reason"),
        )
        .with_columns((pl.col("pairs") * calls_per_pair).alias("judge_calls"))
        .select("query_id", "pairs", "judge_calls", "stop_round", "stop_reason")
    )


def play_round(
    round_no: int,
    query_ids: Sequence[str],
    docs: np.ndarray,
    texts: Mapping[str, str],
    played: PlayedRounds,
    judge: TextJudge,
    rules: RoundRules,
    rows: Rows | None = None,
) -> pl.DataFrame:
    """Round ``round_no`` (1-based) of every query's tournament, given the earlier rounds
    ``played``: pair by ``rules`` (:meth:`RoundRules.plan`; ``rows``: a replay of some queries
    of a whole tournament), judge, and return its judgments table."""
    pairs = rules.plan(round_no, played, docs, rows).pairs
    return judge_pairs(
        round_no, pairs, query_ids, docs, texts, judge, rules.seed, rules.shown_first
    )


def play_tournament(
    query_ids: Sequence[str],
    docs: np.ndarray,
    texts: Mapping[str, str],
    judge: TextJudge,
    rules: RoundRules,
    log: Callable[[str], None] | None = None,
    n_rounds: int | None = None,
    rows: Rows | None = None,
) -> pl.DataFrame:
    """A whole tournament of ``n_rounds`` rounds (default ``rules.n_rounds``), round after round
    as :func:`play_round` plays them (so its pairs equal the round assets'); all judgments as
    one table. ``rows``: these queries are rows of the build's tournament (a replay pairs them
    exactly as the build did)."""
    n_rounds = rules.n_rounds if n_rounds is None else n_rounds
    tables: list[pl.DataFrame] = []
    for r in range(1, n_rounds + 1):
        played = PlayedRounds.from_frame(
            pl.concat(tables) if tables else None, query_ids, docs.shape[1]
        )
        tables.append(play_round(r, query_ids, docs, texts, played, judge, rules, rows))
        if log:
            log(f"round {r}/{n_rounds}: {tables[-1].height} pairs")
    return pl.concat(tables) if tables else pl.DataFrame()


def rating_table(
    query_ids: Sequence[str],
    docs: np.ndarray,
    played: PlayedRounds,
    soft: bool,
    C: float,
    fit: str = "exact",
) -> pl.DataFrame:
    """Bradley–Terry ratings of every pool candidate: ``query_id, position, doc_id, strength,
    rating`` (min–max to [0, 5] per query), ``games`` (decided) and Swiss ``wins``.

    ``fit``: ``exact`` (the penalized optimum,
    :func:`saber_core.rating.bradley_terry.fit_bradley_terry`)
    or ``sklearn_lbfgs`` (the published scikit-learn fit, stopped early; a candidate without a
    game gets NaN, :func:`saber_core.rating.bradley_terry_published.published_strengths`).
    """
    comparisons = played.comparisons(soft)
    if fit == "sklearn_lbfgs":
        beta = published_strengths(comparisons, C=C)
        rating = relevance_scores(beta)
    else:
        beta = fit_bradley_terry(comparisons, C=C)
        rating = rescale_ratings(beta)
    wins, _ = played.standings()
    nq, n = docs.shape
    return pl.DataFrame(
        {
            "query_id": np.repeat(np.asarray(query_ids, dtype=object), n),
            "position": np.tile(np.arange(n), nq),
            "doc_id": docs.ravel(),
            "strength": beta.ravel(),
            "rating": rating.ravel(),
            "games": comparisons.games().ravel().astype(np.int64),
            "wins": wins.ravel(),
        },
        schema_overrides={"query_id": pl.String, "doc_id": pl.String},
    )


def tournament_violations(table: pl.DataFrame, shown_first: str = "pool_order") -> dict[str, int]:
    """Rule violations of a judgments table: a candidate playing twice in a round
    (``double_plays``), a pair meeting twice in either order (``rematches``), a pair not shown
    in the order ``shown_first`` names (``misordered``: ``pool_order`` wants ``pos_a < pos_b``,
    ``smaller_id`` wants ``cand_a < cand_b`` as strings, ``seeded_random`` has no rule)."""
    plays = pl.concat(
        [table.select("query_id", "round", pl.col(c).alias("pos")) for c in ("pos_a", "pos_b")]
    )
    pair = pl.struct(
        "query_id",
        pl.min_horizontal("pos_a", "pos_b").alias("low"),
        pl.max_horizontal("pos_a", "pos_b").alias("high"),
    )
    wrong = {
        "pool_order": pl.col("pos_a") >= pl.col("pos_b"),
        "smaller_id": pl.col("cand_a") >= pl.col("cand_b"),
        "seeded_random": pl.lit(False),
    }[shown_first]
    return {
        "double_plays": plays.filter(pl.struct("query_id", "round", "pos").is_duplicated()).height,
        "rematches": table.filter(pair.is_duplicated()).height,
        "misordered": table.filter(wrong).height,
    }
