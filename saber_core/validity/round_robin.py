"""How close is the Swiss-BT ranking to a full round robin? (validity, per build)

For a seeded sample of queries (``default_rng([seed, 8]).choice(Q, k, replace=False)``, sorted)
every pair of the pool is judged (pairs the Swiss tournament already judged are reused, the rest
go to the judge), Bradley–Terry is fitted on the full round robin and on the Swiss judgments
alone, and the two strength vectors are compared: Kendall τ-b and pairwise agreement
(:mod:`saber_core.validity.reliability`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import polars as pl

from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import Comparisons, hard_outcomes, soft_outcomes
from saber_core.tournament.judgment_table import TextJudge
from saber_core.tournament.swiss import round_robin_pairs
from saber_core.validity.reliability import kendall_tau_b, pairwise_agreement

SAMPLE_STREAM = 8


def round_robin_sample(n_queries: int, k: int, seed: int) -> np.ndarray:
    """The sorted indices of the ``min(k, Q)`` sampled queries."""
    k = min(k, n_queries)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng([seed, SAMPLE_STREAM])
    return np.sort(rng.choice(n_queries, size=k, replace=False))


def round_robin_agreement(
    query_ids: Sequence[str],
    docs: np.ndarray,
    texts: Mapping[str, str],
    judgments: pl.DataFrame,
    judge: TextJudge,
    *,
    k: int,
    seed: int,
    soft: bool = False,
    C: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> pl.DataFrame:
    """Per sampled query: ``query_id, new_judgments, round_robin_pairs, kendall_tau,
    pairwise_agreement`` of Swiss-BT vs round-robin BT, and ``round_robin_strength`` (the
    round-robin BT strength of every pool position: the reference labels).

    ``judgments`` is the Swiss judgments table (``query_id, pos_a, pos_b, outcome, p_a``);
    outcomes are the judge's probabilities when ``soft``, else the hard outcomes (a dropped
    judgment is NaN either way). ``judge`` is called once per query for the missing pairs.
    """
    n = docs.shape[1]
    pairs = round_robin_pairs(n)
    rows = []
    for qi in round_robin_sample(len(query_ids), k, seed).tolist():
        query = query_ids[qi]
        played = judgments.filter(pl.col("query_id") == query)
        hard = played["outcome"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        p_a = played["p_a"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        y = np.where(np.isnan(hard), np.nan, p_a) if soft else hard
        pa, pb = played["pos_a"].to_numpy(), played["pos_b"].to_numpy()
        # a pair shown larger position first (seeded random order) counts as (low, high), 1 − y
        low, high, y_low = np.minimum(pa, pb), np.maximum(pa, pb), np.where(pa < pb, y, 1.0 - y)
        known = dict(zip(zip(low.tolist(), high.tolist(), strict=True), y_low, strict=True))
        todo = [(i, j) for i, j in pairs.tolist() if (i, j) not in known]
        verdict = judge(
            [texts[query]] * len(todo),
            [texts[docs[qi, i]] for i, _ in todo],
            [texts[docs[qi, j]] for _, j in todo],
        )
        p = np.asarray(verdict.p_first, dtype=float)
        fresh = hard_outcomes(p)
        new = dict(zip(todo, soft_outcomes(p) if soft else fresh, strict=True))
        outcome = np.array([known.get((i, j), new.get((i, j))) for i, j in pairs.tolist()], float)
        zeros = np.zeros(len(pairs), dtype=np.int64)
        rr = fit_bradley_terry(Comparisons(zeros, pairs[:, 0], pairs[:, 1], outcome, 1, n), C=C)
        swiss = Comparisons(
            np.zeros(played.height, dtype=np.int64), played["pos_a"], played["pos_b"], y, 1, n
        )
        sw = fit_bradley_terry(swiss, C=C)
        rows.append(
            {
                "query_id": query,
                "new_judgments": len(todo),
                "round_robin_pairs": len(pairs),
                "kendall_tau": float(kendall_tau_b(sw, rr)[0]),
                "pairwise_agreement": float(pairwise_agreement(sw, rr)[0]),
                "round_robin_strength": rr[0].tolist(),
            }
        )
        if log:
            log(f"round robin for {query}: {len(todo)} new judgments")
    schema = {
        "query_id": pl.String,
        "new_judgments": pl.Int64,
        "round_robin_pairs": pl.Int64,
        "kendall_tau": pl.Float64,
        "pairwise_agreement": pl.Float64,
        "round_robin_strength": pl.List(pl.Float64),
    }
    return pl.DataFrame(rows, schema=schema)
