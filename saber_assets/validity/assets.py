"""Group ``validity``: how far to trust this build's labels.

* ``rating_intervals`` — percentile bootstrap 95% intervals of every rating;
* ``recipe_sensitivity`` — the pools selected again from the *other* summary recipe, the build's
  tournament played on them, and how the two benchmarks agree (pool overlap, rank correlation of
  shared candidates' ratings, BM25 / MiniLM nDCG@10 shift);
* ``validity_report`` — Swiss-BT vs round-robin BT on a query sample, the retriever leaderboard
  under the build's vs the round-robin labels of that sample (Kendall τ, |ΔnDCG@10|), judge calls
  spent and saved, position bias, split-half reliability, replayed cheap-judge triage, the
  two-way contamination gate and the recipe figures, as tables, ``validity.md`` and plots.
"""

import hashlib
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.discovery import alternative_pools
from saber_assets.resources import BuildResource, StoreResource
from saber_assets.style import own_summary_origin, style_report
from saber_assets.tables import corpus_texts, pool_matrix
from saber_assets.tournament import bound_judge, with_provenance
from saber_assets.validity.labels import label_extra, label_figures
from saber_assets.validity.report import (
    recipe_plot,
    round_robin_plot,
    triage_plot,
    validity_markdown,
)
from saber_assets.validity.variants import Variant, play_variant
from saber_config import PlanReads
from saber_core.inputs.corpus import full_text_expr
from saber_core.rating.comparisons import PlayedRounds
from saber_core.signals.jaccard import TOKENIZER_VERSION, build_token_matrix, pool_jaccard
from saber_core.tournament.judgment_table import tournament_violations
from saber_core.validity.contamination import contamination_flags
from saber_core.validity.reliability import (
    bootstrap_intervals,
    mean_and_se,
    sample_subset,
    split_half_reliability,
)
from saber_core.validity.round_robin import round_robin_agreement
from saber_core.validity.triage import triage_replay
from saber_eval.version import code_hash as eval_code_hash
from saber_llm.judges import PairwiseJudge
from saber_runtime.metadata import check
from saber_runtime.stage import StageOutput, materialize_stage
from saber_slurm import SlurmDispatch
from saber_store.sources import (
    alternative_summaries,
    load_corpus_frame,
    source_fingerprint,
)

TRIAGE_THRESHOLDS = (0.1, 0.2, 0.3, 0.4)
RECIPE_RETRIEVERS = ("bm25", "st:minilm")
RECIPE_STREAM = 9  # the recipe query sample draws from default_rng([seed, 9])


@dg.asset(group_name="validity", deps=["judgments", "candidate_pools"])
def rating_intervals(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Percentile bootstrap 95% intervals of every rating (seeded; resampled judgments)."""
    plan = build.reads()
    rating, draws = plan.rating, plan.validity.bootstrap

    def compute() -> StageOutput:
        query_ids, docs = pool_matrix(store)
        nq, n = docs.shape
        played = PlayedRounds.from_frame(store.read_table("judgments"), query_ids, n)
        boot = bootstrap_intervals(
            played.comparisons(rating.soft),
            n_boot=draws,
            seed=plan.seed,
            C=rating.c,
            keep_replicates=False,
        )
        table = pl.DataFrame(
            {
                "query_id": np.repeat(query_ids, n),
                "position": np.tile(np.arange(n), nq),
                "doc_id": docs.ravel(),
                "rating_lower": boot.rating_lower.ravel(),
                "rating_upper": boot.rating_upper.ravel(),
                "strength_lower": boot.strength_lower.ravel(),
                "strength_upper": boot.strength_upper.ravel(),
            }
        )
        width = float((table["rating_upper"] - table["rating_lower"]).mean())
        figures = {"bootstrap_draws": draws, "level": boot.level, "mean_width_0_5": width}
        return StageOutput({"rating_intervals": table}, figures=figures)

    return materialize_stage(context, store, plan, compute=compute)


# ----------------------------------------------------------------------------- recipe
def _digest(frame: pl.DataFrame | None) -> str | None:
    """sha256 of the alternative summaries (doc_id, summary), in row order."""
    if frame is None:
        return None
    digest = hashlib.sha256()
    for doc_id, summary in frame.select("doc_id", "summary").iter_rows():
        digest.update(f"{doc_id}\x1f{summary}\x1e".encode())
    return digest.hexdigest()


def _recipe_comparison(context, plan, store, judge, slurm, corpus, pools, own, other):
    """Play the build's tournament on the other recipe's pools (a seeded sample of the queries
    both recipes could fill) and compare: (tables, figures, plot)."""
    ratings = store.read_table("bt_ratings").sort("query_id", "position")
    both = sorted(set(ratings["query_id"]) & set(pools["query_id"]))
    picked = sample_subset(both, plan.validity.recipe_queries, plan.seed, RECIPE_STREAM)
    pools = pools.filter(pl.col("query_id").is_in(picked)).sort("query_id", "position")
    played = play_variant(
        context,
        plan,
        store,
        judge,
        slurm,
        corpus,
        pools,
        plan.tournament.rules,
        plan.rating.fit,
        RECIPE_RETRIEVERS,
        (own, other),
        "recipe_sensitivity",
    )
    pools = pools.with_columns(
        played.ratings["strength"], played.ratings["rating"], pl.lit(other).alias("summary_origin")
    )
    ndcg = played.ndcg.rename({"variant": "summary_origin"})
    shared = ratings.select("query_id", "doc_id", pl.col("rating").alias(f"rating_{own}")).join(
        pools.select("query_id", "doc_id", pl.col("rating").alias(f"rating_{other}")),
        on=["query_id", "doc_id"],
    )
    plot = recipe_plot(
        shared, ndcg, own, other, RECIPE_RETRIEVERS, plan.paths.export_dir / "validity_recipe.png"
    )
    tables = {
        "recipe_queries": played.agreement,
        "recipe_pools": pools,
        "recipe_judgments": with_provenance(played.judgments, judge),
        "recipe_ndcg": ndcg,
    }
    figures = _recipe_figures(played, ndcg)
    figures["n_queries_without_other_recipe_pool"] = ratings["query_id"].n_unique() - len(both)
    return tables, figures, plot


def _recipe_figures(played: Variant, ndcg: pl.DataFrame) -> dict:
    per_query = played.agreement
    means = ndcg.group_by("retriever", "summary_origin").agg(pl.col("ndcg@10").mean())
    mean = {(r, o): v for r, o, v in means.rows()}
    rho, rho_se = mean_and_se(per_query["spearman"].fill_null(np.nan).to_numpy())
    tau, tau_se = mean_and_se(per_query["kendall_tau"].fill_null(np.nan).to_numpy())
    return {
        "n_queries_compared": per_query.height,
        "mean_pool_overlap": float(per_query["pool_overlap"].mean()),
        "mean_shared_candidates": float(per_query["n_shared"].mean()),
        "shared_rating_spearman": rho,
        "shared_rating_spearman_se": rho_se,
        "shared_rating_kendall_tau": tau,
        "shared_rating_kendall_tau_se": tau_se,
        "ndcg@10": {f"{r} / {o} summaries": float(v) for (r, o), v in mean.items()},
        "ndcg_shift_llm_minus_human": {
            r: float(mean[(r, "llm")] - mean[(r, "human")]) for r in RECIPE_RETRIEVERS
        },
        "recipe_judgments": played.judgments.height,
        "recipe_judge_backend_calls": played.calls,
        "recipe_judge_cache_hits": played.hits,
    }


EMPTY_RECIPE = {  # written empty, so no table of an earlier recipe run stays behind
    "recipe_queries": {"query_id": pl.String, "pool_overlap": pl.Float64},
    "recipe_pools": {"query_id": pl.String, "doc_id": pl.String},
    "recipe_judgments": {"query_id": pl.String, "p_a": pl.Float64},
    "recipe_ndcg": {"retriever": pl.String, "ndcg@10": pl.Float64},
}


def _recipe_checks(size: int):
    def checks(tables, figures) -> list[dg.AssetCheckResult]:
        pools, t = tables["recipe_pools"], tables["recipe_judgments"]
        if t.height == 0:
            return [
                check("recipe_tournament_valid", True, f"nothing to check: {figures['recipe']}")
            ]
        bad_size = pools.group_by("query_id").len().filter(pl.col("len") != size).height
        self_rows = pools.filter(pl.col("query_id") == pl.col("doc_id")).height
        bad = tournament_violations(t, t["shown_first"][0])
        return [
            check(
                "recipe_tournament_valid",
                bad_size == 0 and self_rows == 0 and bad["double_plays"] == bad["rematches"] == 0,
                f"other-recipe pools have {size} candidates, never the query itself; each "
                "candidate plays at most once per round and never a rematch",
                n_bad_pools=bad_size,
                n_self=self_rows,
                n_double_plays=bad["double_plays"],
                n_rematches=bad["rematches"],
            )
        ]

    return checks


def recipe_sensitivity(
    context: dg.AssetExecutionContext,
    build: BuildResource,
    store: StoreResource,
    judge: dg.ResourceParam[PairwiseJudge],
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Pools, tournament and ratings from the other summary recipe; overlap, rank correlation
    of shared candidates' ratings and the BM25 / MiniLM nDCG@10 shift between the two."""
    plan = build.reads()
    corpus, own = store.read_table("corpus"), own_summary_origin(store)
    alternative, other, description = alternative_summaries(
        plan.validity.recipe_summaries, plan.inputs.corpus, own, corpus
    )

    def compute() -> StageOutput:
        head = {"recipe": description, "own_summaries": own}
        if alternative is None:
            empty = {name: pl.DataFrame(schema=schema) for name, schema in EMPTY_RECIPE.items()}
            return StageOutput(
                empty, figures={"recipe": f"n/a: {description}", "own_summaries": own}
            )
        pools, missing = alternative_pools(plan.engine)(context, plan, store, corpus, alternative)
        tables, figures, plot = _recipe_comparison(
            context, plan, store, judge, slurm, corpus, pools, own, other
        )
        figures = {
            **head,
            "other_summaries": other,
            "n_docs_without_alternative_summary": missing,
            **figures,
        }
        return StageOutput(tables, figures=figures, plots={"recipe": plot})

    extra = {
        "description": description,
        "alternative": _digest(alternative),
        "judge": judge.provenance(),
        "tokenizer": TOKENIZER_VERSION,
        "retrievers": list(RECIPE_RETRIEVERS),
        "eval_code": eval_code_hash(),
    }
    size = plan.plan.pools.config.pool_size  # the check's expectation, not an input
    return materialize_stage(
        context, store, plan, compute=compute, extra=extra, checks=_recipe_checks(size)
    )


RECIPE_DEPS = {
    "per_query": [
        "corpus",
        "summaries",
        "queries",
        "topic_similarity",
        "candidate_pools",  # the build's query rows (a variant replays each as its row)
        "bt_ratings",
    ],
    "all_pairs": [
        "corpus",
        "summaries",
        "ontology",
        "topic_annotations",
        "queries",
        "pair_histograms",
        "candidate_pools",
        "bt_ratings",
    ],
}


def recipe_sensitivity_asset(engine: str) -> dg.AssetsDefinition:
    """``recipe_sensitivity`` for a discovery engine (its upstream differs)."""
    return dg.asset(
        name="recipe_sensitivity",
        group_name="validity",
        deps=RECIPE_DEPS[engine],
        kinds={"duckdb"},
        check_specs=[dg.AssetCheckSpec("recipe_tournament_valid", asset="recipe_sensitivity")],
    )(recipe_sensitivity)


# ----------------------------------------------------------------------------- report
def _contamination(plan: PlanReads, corpus, query_ids, docs) -> tuple[pl.DataFrame, str]:
    """Two-way containment of queries and candidates against the registered external corpus."""
    v = plan.validity
    if not v.contamination_corpus:
        return pl.DataFrame(), "no external corpus registered (contamination_corpus)"
    external = load_corpus_frame(v.contamination_corpus)
    ext_text = external.select(full_text_expr(pl.col("problem"), pl.col("solution"))).to_series()
    texts = corpus_texts(corpus)
    bench_ids = list(dict.fromkeys([*query_ids, *docs.ravel().tolist()]))
    table = contamination_flags(
        bench_ids,
        [texts[d] for d in bench_ids],
        set(query_ids),
        external["doc_id"].cast(pl.String).to_list(),
        ext_text.to_list(),
        n=v.contam_ngram,
        threshold=v.contam_threshold,
    )
    return table, f"{len(ext_text)} external texts, n={v.contam_ngram}"


def _cheap_relevance(corpus: pl.DataFrame, query_ids: list[str], docs: np.ndarray) -> np.ndarray:
    """(Q, n) token Jaccard of each query's full text with each candidate's: the cheap judge."""
    row_of = {d: i for i, d in enumerate(corpus["doc_id"].to_list())}
    tokens = build_token_matrix(
        corpus.select(full_text_expr(pl.col("problem"), pl.col("solution"))).to_series()
    )
    return pool_jaccard(tokens, [row_of[q] for q in query_ids], np.vectorize(row_of.get)(docs))


def _validity_figures(store, rr, half, triage, slope, contamination, note) -> dict:
    recipe = store.figures_of("recipe_sensitivity")
    intervals = store.read_table("rating_intervals")
    width = intervals.select((pl.col("rating_upper") - pl.col("rating_lower")).mean()).item()
    llm = (store.read_table("summaries")["summary_origin"] == "llm").any()
    return {
        "round_robin_queries": rr.height,
        "swiss_vs_round_robin_tau": float(rr["kendall_tau"].mean()) if rr.height else None,
        "swiss_vs_round_robin_agreement": (
            float(rr["pairwise_agreement"].mean()) if rr.height else None
        ),
        "split_half_reliability": float(half.mean),
        "split_half_r": float(half.mean_r),
        "mean_interval_width": float(width),
        "triage_slope": float(slope),
        "triage": triage.to_dicts(),
        "contamination": note,
        "n_contaminated_queries": int(contamination["is_query"].sum())
        if contamination.height
        else 0,
        "recipe": recipe["recipe"],
        "recipe_pool_overlap": recipe.get("mean_pool_overlap"),
        "recipe_shared_rating_spearman": recipe.get("shared_rating_spearman"),
        "recipe_shared_rating_kendall_tau": recipe.get("shared_rating_kendall_tau"),
        "recipe_ndcg_shift_llm_minus_human": recipe.get("ndcg_shift_llm_minus_human"),
        "generator_free_summaries": not llm,
    }


def _write_report(plan, store, figures, rr, triage) -> tuple[Path, dict[str, Path]]:
    """``validity.md`` and its plots in the export folder."""
    out = plan.paths.export_dir
    plots = {"triage": triage_plot(triage, out / "validity_triage.png")}
    if rr.height:
        plots["round_robin"] = round_robin_plot(rr, out / "validity_round_robin.png")
    recipe_ndcg = store.figures_of("recipe_sensitivity").get("ndcg@10")
    if recipe_ndcg:
        plots["recipe"] = out / "validity_recipe.png"
    report = out / "validity.md"
    report.write_text(validity_markdown(figures, triage, recipe_ndcg or {}, plots))
    return report, plots


def _contamination_checks(threshold: float):
    def checks(tables, figures) -> list[dg.AssetCheckResult]:
        flags = tables["contamination_flags"]
        bad = flags.filter(pl.col("is_query")) if flags.height else flags
        return [
            check(
                "no_contaminated_queries",
                figures["n_contaminated_queries"] == 0,
                f"no query reaches two-way n-gram containment ≥ {threshold} "
                f"with the external corpus ({figures['contamination']})",
                offenders=bad["doc_id"].unique().to_list() if bad.height else [],
            )
        ]

    return checks


@dg.asset(
    group_name="validity",
    deps=[
        "judgments",
        "bt_ratings",
        "candidate_pools",
        "corpus",
        "queries",
        "summaries",
        "rating_intervals",
        "recipe_sensitivity",
    ],
    check_specs=[dg.AssetCheckSpec("no_contaminated_queries", asset="validity_report")],
)
def validity_report(
    context: dg.AssetExecutionContext,
    build: BuildResource,
    store: StoreResource,
    judge: dg.ResourceParam[PairwiseJudge],
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Tournament reliability, triage, contamination and recipe figures for this build."""
    plan = build.reads()
    rating, v = plan.rating, plan.validity
    external = v.contamination_corpus

    def compute() -> StageOutput:
        query_ids, docs = pool_matrix(store)
        corpus, judgments = store.read_table("corpus"), store.read_table("judgments")
        played = PlayedRounds.from_frame(judgments, query_ids, docs.shape[1])
        played = played.comparisons(rating.soft)
        bound = bound_judge(context, plan, store, judge, slurm, "validity")
        options = {"seed": plan.seed, "soft": rating.soft, "C": rating.c, "log": bound.log}
        texts = corpus_texts(corpus)
        rr = round_robin_agreement(
            query_ids, docs, texts, judgments, bound, k=v.rr_queries, **options
        )
        half = split_half_reliability(played, seed=plan.seed, C=rating.c)
        first_round = judgments["round"].to_numpy() == 1
        cheap = _cheap_relevance(corpus, query_ids, docs)
        triage, slope = triage_replay(played, first_round, cheap, TRIAGE_THRESHOLDS, C=rating.c)
        contamination, note = _contamination(plan, corpus, query_ids, docs)
        figures = _validity_figures(store, rr, half, triage, slope, contamination, note)
        figures |= label_figures(plan, store, judgments, rr, query_ids, docs)
        figures["style"] = style_report(plan, store, docs, played)
        report, plots = _write_report(plan, store, figures, rr, triage)
        tables = {
            "validity_round_robin": rr,
            "validity_triage": triage,
            "contamination_flags": contamination,
        }
        return StageOutput(tables, figures=figures, files=[report], plots=plots)

    extra = {
        "judge": judge.provenance(),
        "external": source_fingerprint(external) if external else None,
        **label_extra(),
    }
    checks = _contamination_checks(plan.plan.validity.contam_threshold)
    return materialize_stage(context, store, plan, compute=compute, extra=extra, checks=checks)
