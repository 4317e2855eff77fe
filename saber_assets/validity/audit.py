"""``sabermath_audit`` (group ``validity``): what each published defect does to this build.

For every audited fix (``audit_fixes``; ``all`` = every fix that applies to this build's
construction) the build is replayed with that fix toggled — on when the build runs the published
behaviour, off when it runs the fix — on its queries (a seeded sample of ``audit_queries``,
0 = all): discovery fixes (``ancestor_check``, ``root_self_similarity``, ``empty_idea_jaccard``)
redo the all-pairs discovery (thresholds, counts and the replayed draws) and select the queries'
pools again; tournament fixes (``sit_outs``, ``presentation``) replay the tournament on the same
pools; ``bt_exact`` replays the same tournament and fits it exactly. Every variant is judged
by the build's judge through the call cache, and every sampled query is played as the row it is
in the build's tournament (:mod:`saber_core.tournament.rows`), so a variant differs from the
build only by its fix. The first row is a control, replayed with no fix: it must reproduce the
build (rating Spearman 1.000, nDCG@10 shift 0) — a control that does not is reported, since the
fixes' numbers would then measure the replay. Reported per fix: the share of queries whose pool
changed, the mean pool overlap, the Spearman / Kendall τ of the shared candidates' ratings, and
BM25's nDCG@10 on the build and on the variant.
"""

from dataclasses import replace

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.discovery.all_pairs_pools import INPUTS, variant_pool_frame
from saber_assets.resources import BuildResource, StoreResource
from saber_assets.validity.variants import play_variant
from saber_config import BuildConfig, PlanReads, unwrap
from saber_core.construction import FIX_NEEDS, FIXES, Construction
from saber_core.validity.reliability import mean_and_se, sample_subset
from saber_llm.judges import PairwiseJudge
from saber_runtime.stage import StageOutput, materialize_stage
from saber_slurm import SlurmDispatch

DISCOVERY_FIXES = ("ancestor_check", "root_self_similarity", "empty_idea_jaccard")
TOURNAMENT_FIXES = ("sit_outs", "presentation")
AUDIT_STREAM = 11  # the audited query sample draws from default_rng([seed, 11])


def applicable_fixes(plan: Construction) -> list[str]:
    """The fixes whose published step this construction runs (all_pairs only for discovery)."""
    fits = [f for f in FIXES if getattr(plan, FIX_NEEDS[f][0]) == FIX_NEEDS[f][1]]
    return [f for f in fits if f not in DISCOVERY_FIXES or plan.engine == "all_pairs"]


def audited_fixes(plan: PlanReads) -> list[str]:
    """``audit_fixes`` (``all`` = every applicable fix), in :data:`FIXES` order."""
    wanted = set(plan.audit.fixes)
    applicable = applicable_fixes(unwrap(plan.construction))
    return [f for f in applicable if "all" in wanted or f in wanted]


def toggled(plan: Construction, fix: str) -> Construction:
    """The construction with ``fix`` switched (on if off, off if on)."""
    fixes = set(plan.fixes) ^ {fix}
    return replace(plan, fixes=tuple(f for f in FIXES if f in fixes))


CONTROL = "control (no fix)"


def _variant(context, plan: PlanReads, store, judge, slurm, corpus, sample, fix: str) -> dict:
    """The build replayed on ``sample`` with ``fix`` toggled (:data:`CONTROL`: nothing toggled,
    which must reproduce the build exactly)."""
    steps = unwrap(plan.construction)
    steps = steps if fix == CONTROL else toggled(steps, fix)
    pools = store.read_table("candidate_pools").filter(pl.col("query_id").is_in(sample))
    rules = plan.tournament.rules
    if fix in DISCOVERY_FIXES:
        pools = variant_pool_frame(context, plan, store, steps, sample, f"audit-{fix}")
    elif fix in TOURNAMENT_FIXES:
        rules = replace(
            rules, sit_outs=steps.has_fix("sit_outs"), presentation=steps.has_fix("presentation")
        )
    played = play_variant(
        context,
        plan,
        store,
        judge,
        slurm,
        corpus,
        pools,
        rules,
        "exact" if steps.has_fix("bt_exact") else steps.bt,
        ("bm25",),
        ("build", "variant"),
        f"audit {fix}",
    )
    agreement = played.agreement
    means = dict(played.ndcg.group_by("variant").agg(pl.col("ndcg@10").mean()).rows())
    spearman, _ = mean_and_se(agreement["spearman"].fill_null(np.nan).to_numpy())
    kendall, _ = mean_and_se(agreement["kendall_tau"].fill_null(np.nan).to_numpy())
    return {
        "fix": fix,
        "build_has_fix": fix in plan.construction.fixes,
        "queries": len(sample),
        "queries_with_variant_pool": agreement.height,
        "pools_changed": float((agreement["pool_overlap"] < 1.0).mean())
        if agreement.height
        else 0.0,
        "mean_pool_overlap": float(agreement["pool_overlap"].mean()) if agreement.height else None,
        "rating_spearman": spearman,
        "rating_kendall_tau": kendall,
        "bm25_ndcg_build": means.get("build"),
        "bm25_ndcg_variant": means.get("variant"),
        "bm25_ndcg_shift": (means.get("variant") or 0.0) - (means.get("build") or 0.0),
        "judge_backend_calls": played.calls,
        "judge_cache_hits": played.hits,
    }


def sabermath_audit(
    context: dg.AssetExecutionContext,
    build: BuildResource,
    store: StoreResource,
    judge: dg.ResourceParam[PairwiseJudge],
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Per published defect: its measured effect on this build (module docstring)."""
    plan = build.reads()
    fixes = audited_fixes(plan)

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        query_ids = store.read_table("queries")["query_id"].to_list()
        sample = sample_subset(query_ids, plan.audit.queries, plan.seed, AUDIT_STREAM)
        rows = []
        for fix in [CONTROL, *fixes]:
            context.log.info(f"sabermath_audit: {fix} on {len(sample)} queries")
            rows.append(_variant(context, plan, store, judge, slurm, corpus, sample, fix))
        table = pl.DataFrame(rows, infer_schema_length=None)
        control = table.row(0, named=True)
        exact = control["rating_spearman"] >= 1.0 - 1e-12 and control["bm25_ndcg_shift"] == 0.0
        figures = {"fixes": fixes, "queries": len(sample), "control_reproduces_the_build": exact,
                   "audit": table.to_dicts()}  # fmt: skip
        return StageOutput({"sabermath_audit": table}, figures=figures)

    extra = {"judge": judge.provenance()}
    return materialize_stage(context, store, plan, compute=compute, extra=extra)


def audit_asset(build: BuildConfig) -> list[dg.AssetsDefinition]:
    """The audit asset when some published defect applies to this build (else none)."""
    if not audited_fixes(build.reads()):
        return []
    deps = ["queries", "candidate_pools", "judgments", "bt_ratings"]
    if build.plan().engine == "all_pairs":
        deps = [*INPUTS, "pair_histograms", "target_eligibility", *deps]
    return [
        dg.asset(name="sabermath_audit", group_name="validity", deps=deps, kinds={"duckdb"})(
            sabermath_audit
        )
    ]
