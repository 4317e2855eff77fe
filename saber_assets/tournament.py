"""Group ``tournament``: the rounds (one asset per round, so the UI shows each), all judgments,
and the Bradley–Terry ratings."""

from collections import Counter

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.resources import BuildResource, StoreResource
from saber_assets.style import candidate_style, coefficient_figures, style_free
from saber_assets.tables import corpus_texts, played_rounds, pool_matrix
from saber_assets.triage import (
    RoundTriage,
    grade_pools,
    grader_inputs,
    grades_with_build_llm,
    no_grades,
    play_triaged,
    provenance_columns,
    round_triage,
)
from saber_config import PlanReads
from saber_core.rating.bradley_terry_style import fit_style_bradley_terry
from saber_core.rating.noise import strength_noise_variance
from saber_core.rating.scales import scale_ratings
from saber_core.tournament.judgment_table import (
    TextJudge,
    judge_pairs,
    query_budget,
    rating_table,
    status_table,
    tournament_violations,
)
from saber_core.validity.triage_round import triage_budget
from saber_llm.base import LLMBackend
from saber_llm.judges import PairwiseJudge
from saber_runtime.errors import fail_on_backend_errors
from saber_runtime.metadata import check
from saber_runtime.stage import StageOutput, materialize_stage
from saber_slurm import SlurmDispatch, maybe_dispatcher
from saber_store.database import DuckDBStore


def round_name(r: int) -> str:
    """Asset (and table) name of round ``r`` (1-based)."""
    return f"tournament_round_{r:02d}"


def bound_judge(context, plan: PlanReads, store, judge: PairwiseJudge, slurm, stage: str):
    """The judge as a core ``judge(queries, first, second)`` callable for this run (SLURM
    dispatch when configured, which never changes an answer), logging under ``stage``."""
    backend = getattr(judge, "backend", None)
    dispatch = maybe_dispatcher(plan.plan.execution, slurm, context, backend, store)
    log = lambda message: context.log.info(f"{stage}: {message}")  # noqa: E731
    return judge.bound(store, context.run.run_id, dispatch, log)


def with_provenance(table: pl.DataFrame, judge: PairwiseJudge) -> pl.DataFrame:
    """The judge's provenance columns (one schema for every judge) added to a judgments table."""
    return provenance_columns(table, judge.provenance())


@dg.asset(group_name="tournament", deps=["corpus", "queries", "candidate_pools"])
def pointwise_grades(
    context: dg.AssetExecutionContext,
    build: BuildResource,
    store: StoreResource,
    llm: dg.ResourceParam[LLMBackend],
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Every pool candidate graded by the pointwise judge (``tournament.pointwise_judge``, a
    retriever spec; no rows when it is ''), with the provenance the judgments carry;
    ``yesno:build`` grades with the build's LLM where its other LLM stages run."""
    plan = build.reads()
    spec = plan.tournament.pointwise_judge
    own_llm = bool(spec) and grades_with_build_llm(spec)

    def compute() -> StageOutput:
        if not spec:
            return StageOutput({"pointwise_grades": no_grades()}, figures={"grader": ""})
        execution = plan.plan.execution
        dispatch = maybe_dispatcher(execution, slurm, context, llm, store) if own_llm else None
        table, notes = grade_pools(plan, store, spec, context.run.run_id, llm, dispatch)
        figures = {
            "grader": spec,
            "n_grades": table.height,
            "mean_score": float(table["score"].mean()),
            "grader_notes": {k: v for k, v in notes.items() if isinstance(v, int | float | str)},
        }
        return StageOutput({"pointwise_grades": table}, figures=figures)

    extra = grader_inputs(spec, llm if own_llm else None)
    return materialize_stage(context, store, plan, compute=compute, extra=extra)


def make_round_asset(r: int) -> dg.AssetsDefinition:
    """The asset of round ``r``: pair on the earlier rounds, judge, store the judgments."""
    name = round_name(r)
    earlier = [round_name(k) for k in range(1, r)]

    @dg.asset(
        name=name,
        group_name="tournament",
        deps=["corpus", "candidate_pools", "pointwise_grades", *earlier],
        kinds={"duckdb"},
    )
    def _round(
        context: dg.AssetExecutionContext,
        build: BuildResource,
        store: StoreResource,
        judge: dg.ResourceParam[PairwiseJudge],
        slurm: SlurmDispatch,
    ) -> dg.MaterializeResult:
        plan = build.reads()

        def compute() -> StageOutput:
            query_ids, docs = pool_matrix(store)
            played = played_rounds(store, earlier, query_ids, docs.shape[1] if docs.size else 0)
            texts = corpus_texts(store.read_table("corpus"))
            bound = bound_judge(context, plan, store, judge, slurm, name)
            rules = plan.tournament.rules
            planned = rules.plan(r, played, docs)
            triage = round_triage(plan, store, earlier, query_ids, docs)
            table, triaged = _play(
                r, planned.pairs, query_ids, docs, texts, plan, bound, judge, triage
            )
            s = bound.stats
            fail_on_backend_errors(name, s.errors, s.calls, s.hits)
            n = docs.shape[1] if docs.size else 0
            figures = {
                "n_pairs": table.height,
                "n_dropped": int(table["outcome"].null_count()),
                "llm_cache_hits": s.hits,
                "llm_backend_calls": s.calls,
                "llm_errors": s.errors,
                **s.prefix_cache(),
                "n_byes_beyond_odd": len(query_ids) * (n - n % 2) - 2 * table.height,
                "judge": judge.provenance(),
                "query_status": dict(Counter(planned.status.tolist())),
                **triaged,
            }
            tables = {name: table, f"{name}_status": status_table(r, query_ids, planned)}
            return StageOutput(tables, figures=figures)

        extra = {"round": r, "judge": judge.provenance()}
        return materialize_stage(context, store, plan, compute=compute, extra=extra)

    return _round


def _play(
    r: int,
    pairs: np.ndarray,
    query_ids: list[str],
    docs: np.ndarray,
    texts: dict[str, str],
    plan: PlanReads,
    bound: TextJudge,
    judge: PairwiseJudge,
    triage: RoundTriage | None,
) -> tuple[pl.DataFrame, dict]:
    """Round ``r``'s judgments with provenance, and its triage figures (none when off): pairs
    decided by the grades, pairs judged, judge calls saved = decided × calls per pair."""
    rules = plan.tournament.rules
    if triage is None:
        table = judge_pairs(r, pairs, query_ids, docs, texts, bound, rules.seed, rules.shown_first)
        return with_provenance(table, judge), {}
    table, split = play_triaged(
        r, pairs, query_ids, docs, texts, bound, judge.provenance(), rules, triage
    )
    figures = {
        "triage": triage.rule.mode,
        "triage_slope": triage.k,
        "n_decided_by_triage": split.n_decided,
        "n_judged": split.n_judged,
        "judge_calls_saved": split.n_decided * plan.tournament.calls_per_judgment,
    }
    return table, figures


def _judgment_checks(tables, figures) -> list[dg.AssetCheckResult]:
    table = tables["judgments"]
    shown = table["shown_first"][0] if table.height else "pool_order"
    bad = tournament_violations(table, shown)
    return [
        check(
            "once_per_round_no_rematch",
            not any(bad.values()),
            "each candidate plays at most once per round, never a rematch, pairs shown "
            f"{shown.replace('_', ' ')} first",
            **{f"n_{k}": v for k, v in bad.items()},
        )
    ]


def budget_figures(per_query: pl.DataFrame, store: DuckDBStore, rounds: int, per_pair: int) -> dict:
    """Judge calls spent, the calls a full Swiss of ``rounds`` rounds would spend (every query
    ``rounds · ⌊n / 2⌋`` pairs at the same calls per pair), the share saved, stop reasons."""
    pools = store.read_table("candidate_pools").group_by("query_id").len()
    full_pairs = int((pools["len"] // 2).sum()) * rounds
    calls, full_calls = int(per_query["judge_calls"].sum()), full_pairs * per_pair
    return {
        "judge_calls": calls,
        "judge_calls_full_swiss": full_calls,
        "judge_calls_saved": 1.0 - calls / full_calls if full_calls else 0.0,
        "stop_reasons": dict(per_query.group_by("stop_reason").len().rows()),
    }


def make_judgments_asset(rounds: int) -> dg.AssetsDefinition:
    """``judgments``: every round's judgments in one table."""
    names = [round_name(r) for r in range(1, rounds + 1)]

    @dg.asset(
        group_name="tournament",
        deps=[*names, "candidate_pools"],
        check_specs=[dg.AssetCheckSpec("once_per_round_no_rematch", asset="judgments")],
    )
    def judgments(
        context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
    ) -> dg.MaterializeResult:
        """Every judgment of every round, with its provenance; per query the judge calls spent
        and why its tournament stopped (``tournament_queries``)."""
        plan = build.reads()
        per_pair = plan.tournament.calls_per_judgment

        def compute() -> StageOutput:
            table = pl.concat([store.read_table(n) for n in names], how="vertical")
            status = pl.concat([store.read_table(f"{n}_status") for n in names])
            per_query, triaged = triage_budget(query_budget(status, per_pair), table, per_pair)
            dropped = table.filter(pl.col("outcome").is_null())
            figures = {
                "n_judgments": table.height,
                "n_dropped": dropped.height,
                "drop_reasons": dict(dropped.group_by("drop_reason").len().head(10).rows()),
                **budget_figures(per_query, store, rounds, per_pair),
                **triaged,
            }
            tables = {"judgments": table, "tournament_queries": per_query}
            return StageOutput(tables, figures=figures)

        return materialize_stage(
            context, store, plan, compute=compute, extra={"rounds": rounds}, checks=_judgment_checks
        )

    return judgments


def _rating_checks(store: DuckDBStore, ratings: pl.DataFrame) -> list[dg.AssetCheckResult]:
    rating = pl.col("rating")
    out = ratings.filter((rating < 0) | (rating > 5) | rating.is_nan())
    pools = store.read_table("candidate_pools").select("query_id", "doc_id")
    missing = pools.join(ratings, on=["query_id", "doc_id"], how="anti")
    return [
        check(
            "ratings_in_range",
            out.height == 0,
            "every rating lies in [0, 5]",
            n_out_of_range=out.height,
        ),
        check(
            "no_missing_ratings",
            missing.height == 0,
            "every pool candidate has a rating",
            n_missing=missing.height,
        ),
    ]


@dg.asset(
    group_name="tournament",
    deps=["judgments", "candidate_pools", "corpus", "summaries"],
    check_specs=[
        dg.AssetCheckSpec("ratings_in_range", asset="bt_ratings"),
        dg.AssetCheckSpec("no_missing_ratings", asset="bt_ratings"),
    ],
)
def bt_ratings(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Bradley–Terry strengths per query, min–max rescaled to [0, 5]; with
    ``rating.style_control`` the style-free strengths of the style-controlled fit."""
    plan = build.reads()
    rating = plan.rating

    def compute() -> StageOutput:
        query_ids, docs = pool_matrix(store)
        played = played_rounds(store, ["judgments"], query_ids, docs.shape[1])
        table = rating_table(query_ids, docs, played, rating.soft, rating.c, rating.fit)
        style = {}
        if rating.style_control:
            table, style = _style_controlled(plan, store, docs, table, played)
        table = on_label_scale(table, played.comparisons(rating.soft), rating)
        spread = table.group_by("query_id").agg(pl.col("rating").std())["rating"]
        figures = {
            "n_ratings": table.height,
            "bt_C": rating.c,
            "bt_fit": rating.fit,
            "bt_outcomes": "soft (judge probabilities)" if rating.soft else "hard",
            "label_scale": rating.label_scale,
            "mean_rating": float(table["rating"].mean()),
            "mean_within_query_std": float(spread.mean()),
            "style_control": rating.style_control,
            **style,
        }
        return StageOutput({"bt_ratings": table}, figures=figures)

    return materialize_stage(
        context,
        store,
        plan,
        compute=compute,
        checks=lambda tables, _: _rating_checks(store, tables["bt_ratings"]),
    )


def _style_controlled(plan: PlanReads, store, docs, table, played) -> tuple[pl.DataFrame, dict]:
    """``table`` rated by the style-free strengths of the style-controlled fit, and the fit's
    coefficients as figures (``saber_assets.style``)."""
    style = candidate_style(plan, store, docs)
    comparisons = played.comparisons(plan.rating.soft)
    fit = fit_style_bradley_terry(comparisons, style.z, C=plan.rating.c)
    return style_free(table, fit), {"style": coefficient_figures(style, fit)}


ANCHOR_RANK = 10  # the anchored scale's reference: each query's 10th strongest candidate


def on_label_scale(table: pl.DataFrame, comparisons, rating) -> pl.DataFrame:
    """The ``rating`` column on the build's label scale (``rating.label_scale``; ``minmax`` is
    what ``rating_table`` already wrote). Strengths by query (Q, n); the noisy scales use the
    fit's noise (``saber_core.rating.noise``), ``anchored`` each query's 10th strongest."""
    if rating.label_scale == "minmax":
        return table
    nq = table["query_id"].n_unique()
    beta = table["strength"].to_numpy().reshape(nq, -1)
    noise = strength_noise_variance(comparisons, np.nan_to_num(beta), rating.c)
    rank = min(ANCHOR_RANK, beta.shape[1]) - 1
    reference = np.argsort(-np.nan_to_num(beta, nan=-np.inf), axis=1)[:, rank]
    labels = scale_ratings(rating.label_scale, beta, noise_var=noise, reference=reference)
    return table.with_columns(pl.Series("rating", labels.ravel()))


def tournament_assets(rounds: int) -> list[dg.AssetsDefinition]:
    """``pointwise_grades``, the round assets, ``judgments`` and ``bt_ratings``."""
    return [
        pointwise_grades,
        *(make_round_asset(r) for r in range(1, rounds + 1)),
        make_judgments_asset(rounds),
        bt_ratings,
    ]
