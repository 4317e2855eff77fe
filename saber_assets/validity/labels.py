"""The validity report's label figures: leaderboard stability of the build's labels against the
round-robin labels of the sampled queries (the default retrievers of ``retriever_runs``, run in
memory on the sample, main setting), the judge calls the tournament spent and saved, and the
position bias of its verdicts."""

import numpy as np
import polars as pl

from saber_assets.evaluation import DEFAULT_RETRIEVERS
from saber_config import PlanReads
from saber_core.rating.bradley_terry import rescale_ratings
from saber_core.tournament.presentation import first_answer_share, group_bias
from saber_core.validity.leaderboard_stability import leaderboard_stability
from saber_eval.benchmark import MAIN_SETTING, in_memory_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import retriever_factory
from saber_eval.runner import run_retriever
from saber_eval.version import code_hash as eval_code_hash
from saber_store.database import DuckDBStore

LEADERBOARD_RETRIEVERS = tuple(r for r in DEFAULT_RETRIEVERS if r != "jaccard")


def retriever_scores(
    plan: PlanReads, store: DuckDBStore, query_ids: list[str], docs: np.ndarray
) -> np.ndarray:
    """Scores (R, Q, n) of the build's default retrievers (:data:`LEADERBOARD_RETRIEVERS`:
    all but ``jaccard``, whose scores are the export's pool signal, not computed from text;
    main setting) over the pool positions of ``query_ids``."""
    corpus = store.read_table("corpus")
    sides = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").rows()}
    domains = dict(store.read_table("queries").select("query_id", "domain").rows())
    pools = docs.tolist()
    bench = in_memory_benchmark(
        "leaderboard-stability", query_ids, pools, [[0.0] * len(p) for p in pools], sides, domains
    )
    cache = plan.plan.paths.embedding_cache  # a cache: where it lives changes no score
    registry = load_registry()
    make = retriever_factory(cache, seed=plan.seed, registry=registry)
    runs = [
        run_retriever(bench, make(spec), MAIN_SETTING, registry.get(spec))
        for spec in LEADERBOARD_RETRIEVERS
    ]
    return np.stack([np.stack(r.scores) for r in runs])


def leaderboard_figures(
    plan: PlanReads, store: DuckDBStore, rr: pl.DataFrame, query_ids: list[str], docs
) -> dict:
    """Kendall τ of the retriever leaderboard (mean nDCG@10 on the round-robin sample) under
    the build's ratings vs the round-robin ratings, the |ΔnDCG@10| per retriever, and the group
    bias of the build's ratings (first half of the pool positions over-rated vs the round robin,
    :func:`saber_core.tournament.presentation.group_bias`)."""
    if rr.height == 0:
        return {"leaderboard_tau_vs_round_robin": None}
    sample = rr["query_id"].to_list()
    pools = docs[[query_ids.index(q) for q in sample]]
    scores = retriever_scores(plan, store, sample, pools)
    ratings = store.read_table("bt_ratings").filter(pl.col("query_id").is_in(sample))
    own = np.stack(
        [
            ratings.filter(pl.col("query_id") == q).sort("position")["rating"].to_numpy()
            for q in sample
        ]
    )
    reference = rescale_ratings(np.stack(rr["round_robin_strength"].to_list()))
    board = leaderboard_stability(scores, own, reference)
    names = list(LEADERBOARD_RETRIEVERS)
    return {
        "leaderboard_queries": len(sample),
        "leaderboard_tau_vs_round_robin": board.tau,
        "mean_abs_delta_ndcg@10": board.mean_abs_error,
        "max_abs_delta_ndcg@10": board.max_abs_error,
        "group_bias_vs_round_robin": group_bias(own, reference),
        "ndcg@10_build_labels": dict(zip(names, board.ndcg.round(4).tolist(), strict=True)),
        "ndcg@10_round_robin_labels": dict(
            zip(names, board.reference_ndcg.round(4).tolist(), strict=True)
        ),
    }


def judging_figures(plan: PlanReads, store: DuckDBStore, judgments: pl.DataFrame) -> dict:
    """Pairing, presentation (as the judgments record it), judge calls spent and saved vs a
    full Swiss of the same rounds (from ``judgments``), and the share of verdicts for the
    candidate shown first (n/a when each pair's two orders are averaged)."""
    t = plan.tournament
    spent = store.figures_of("judgments")
    shown = sorted(judgments["shown_first"].unique().to_list()) if judgments.height else []
    averaged = t.calls_per_judgment == 2
    outcome = judgments["outcome"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    return {
        "pairing": t.pairing,
        "presentation": "|".join(shown) or t.shown_first,
        "judge_calls": spent["judge_calls"],
        "judge_calls_full_swiss": spent["judge_calls_full_swiss"],
        "judge_calls_saved": spent["judge_calls_saved"],
        "stop_reasons": spent["stop_reasons"],
        "first_answer_share": None if averaged else first_answer_share(outcome),
    }


def label_figures(
    plan: PlanReads,
    store: DuckDBStore,
    judgments: pl.DataFrame,
    rr: pl.DataFrame,
    query_ids: list[str],
    docs: np.ndarray,
) -> dict:
    """:func:`judging_figures` and :func:`leaderboard_figures` together."""
    return judging_figures(plan, store, judgments) | leaderboard_figures(
        plan, store, rr, query_ids, docs
    )


def label_extra() -> dict:
    """What the label figures depend on outside the plan and the tables (fingerprinted)."""
    return {"leaderboard_retrievers": list(LEADERBOARD_RETRIEVERS), "eval_code": eval_code_hash()}
