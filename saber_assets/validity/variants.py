"""A variant of this build on its own queries — other pools (another summary recipe, a fixed
published defect) or other tournament rules — played with the build's judge through the call
cache and compared with the build: pool overlap, rank agreement of the shared candidates'
ratings, and retrievers' nDCG@10 on both (shared by ``recipe_sensitivity`` and
``sabermath_audit``)."""

from dataclasses import dataclass

import numpy as np
import polars as pl

from saber_assets.tables import corpus_texts, pool_matrix
from saber_assets.tournament import bound_judge
from saber_config import PlanReads
from saber_core.rating.comparisons import PlayedRounds
from saber_core.tournament.judgment_table import RoundRules, play_tournament, rating_table
from saber_core.tournament.rows import Rows
from saber_core.validity.reliability import recipe_agreement
from saber_eval.benchmark import MAIN_SETTING, in_memory_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import retriever_factory
from saber_eval.runner import per_query_ndcg
from saber_runtime.errors import fail_on_backend_errors


@dataclass
class Variant:
    """The variant's judgments and ratings, its per-query agreement with the build, the
    retrievers' nDCG@10 on both (``variant``: ``labels[0]`` = the build, ``labels[1]``), and
    what its judging cost (``calls``, ``hits``)."""

    judgments: pl.DataFrame
    ratings: pl.DataFrame
    agreement: pl.DataFrame
    ndcg: pl.DataFrame
    calls: int
    hits: int


def play_variant(
    context,
    plan: PlanReads,
    store,
    judge,
    slurm,
    corpus: pl.DataFrame,
    pools: pl.DataFrame,
    rules: RoundRules,
    fit: str,
    retrievers: tuple[str, ...],
    labels: tuple[str, str],
    stage: str,
) -> Variant:
    """Play ``rules`` on ``pools`` (``query_id, position, doc_id``; queries of the build), rate
    with ``fit``, and compare with the build's stored ratings of the same queries. Each query is
    played as the row it is in the build's tournament (:class:`Rows`): with the build's pools
    and rules the variant replays the build exactly, so any difference is the variant's."""
    rating = plan.rating
    pools = pools.sort("query_id", "position")
    grouped = pools.group_by("query_id", maintain_order=True).agg("doc_id")
    query_ids, docs = grouped["query_id"].to_list(), np.array(grouped["doc_id"].to_list(), object)
    built = {q: i for i, q in enumerate(pool_matrix(store)[0])}
    rows = Rows(np.array([built[q] for q in query_ids], dtype=np.int64), len(built))
    bound = bound_judge(context, plan, store, judge, slurm, stage)
    texts, rounds = corpus_texts(corpus), plan.tournament.rounds
    judgments = play_tournament(query_ids, docs, texts, bound, rules, bound.log, rounds, rows)
    s = bound.stats
    fail_on_backend_errors(stage, s.errors, s.calls, s.hits)
    played = PlayedRounds.from_frame(judgments, query_ids, docs.shape[1])
    ratings = rating_table(query_ids, docs, played, rating.soft, rating.c, fit)
    variant = ratings["rating"].to_numpy().reshape(docs.shape)
    mine = (
        store.read_table("bt_ratings")
        .filter(pl.col("query_id").is_in(query_ids))
        .sort("query_id", "position")
        .group_by("query_id", maintain_order=True)
        .agg("doc_id", "rating")
    )
    agreement = recipe_agreement(
        query_ids,
        mine["doc_id"].to_list(),
        mine["rating"].to_list(),
        docs.tolist(),
        variant.tolist(),
    )
    sides = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").rows()}
    domains = dict(store.read_table("queries").select("query_id", "domain").rows())
    benchmarks = {
        labels[0]: in_memory_benchmark(
            f"{stage}-{labels[0]}",
            query_ids,
            mine["doc_id"].to_list(),
            mine["rating"].to_list(),
            sides,
            domains,
        ),
        labels[1]: in_memory_benchmark(
            f"{stage}-{labels[1]}", query_ids, docs.tolist(), variant, sides, domains
        ),
    }
    registry = load_registry()
    make = retriever_factory(plan.plan.paths.embedding_cache, seed=plan.seed, registry=registry)
    ndcg = per_query_ndcg(benchmarks, retrievers, make, registry, MAIN_SETTING, bound.log)
    return Variant(judgments, ratings, agreement, ndcg, s.calls, s.hits)
