"""``sabermath_audit`` (group ``validity``): what each published defect does to this build.

For every audited fix (``audit_fixes``; ``all`` = every fix that applies to this build's
construction) the build is replayed with that fix toggled — on when the build runs the published
behaviour, off when it runs the fix — on its queries (a seeded sample of ``audit_queries``,
0 = all): discovery fixes (``ancestor_check``, ``root_self_similarity``, ``empty_idea_jaccard``)
redo the all-pairs discovery (thresholds, counts and the replayed draws) and select the queries'
pools again; tournament fixes (``sit_outs``, ``presentation``) replay the tournament on the same
pools; ``bt_exact`` refits the same judgments. Every variant is judged by the build's judge
through the call cache. Reported per fix: the share of queries whose pool changed, the mean pool
overlap, the Spearman / Kendall τ of the shared candidates' ratings, and BM25's nDCG@10 on the
build and on the variant.
"""

from dataclasses import replace

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.discovery.all_pairs import INPUTS, variant_pool_frame
from saber_assets.tournament import round_rules
from saber_assets.validity.variants import play_variant
from saber_core.construction import FIX_NEEDS, FIXES, Construction
from saber_core.validity.reliability import mean_and_se, sample_subset
from saber_resources.config import BuildConfig
from saber_resources.judges import PairwiseJudge
from saber_resources.slurm import SlurmDispatch
from saber_resources.store.database import DuckDBStore
from saber_runtime.stage import StageOutput, materialize_stage

DISCOVERY_FIXES = ("ancestor_check", "root_self_similarity", "empty_idea_jaccard")
TOURNAMENT_FIXES = ("sit_outs", "presentation")
AUDIT_STREAM = 11  # the audited query sample draws from default_rng([seed, 11])


def applicable_fixes(plan: Construction) -> list[str]:
    """The fixes whose published step this construction runs (all_pairs only for discovery)."""
    fits = [f for f in FIXES if getattr(plan, FIX_NEEDS[f][0]) == FIX_NEEDS[f][1]]
    return [f for f in fits if f not in DISCOVERY_FIXES or plan.engine == "all_pairs"]


def audited_fixes(build: BuildConfig) -> list[str]:
    """``audit_fixes`` (``all`` = every applicable fix), in :data:`FIXES` order."""
    wanted = set(build.construction.audit_fixes)
    applicable = applicable_fixes(build.construction_plan())
    return [f for f in applicable if "all" in wanted or f in wanted]


def toggled(plan: Construction, fix: str) -> Construction:
    """The construction with ``fix`` switched (on if off, off if on)."""
    fixes = set(plan.fixes) ^ {fix}
    return replace(plan, fixes=tuple(f for f in FIXES if f in fixes))


def _variant(context, build, store, judge, slurm, corpus, sample: list[str], fix: str) -> dict:
    plan = toggled(build.construction_plan(), fix)
    pools = store.read_table("candidate_pools").filter(pl.col("query_id").is_in(sample))
    rules = round_rules(build)
    if fix in DISCOVERY_FIXES:
        pools = variant_pool_frame(context, build, store, plan, sample, f"audit-{fix}")
    elif fix in TOURNAMENT_FIXES:
        rules = replace(
            rules, sit_outs=plan.has_fix("sit_outs"), presentation=plan.has_fix("presentation")
        )
    played = play_variant(
        context,
        build,
        store,
        judge,
        slurm,
        corpus,
        pools,
        rules,
        plan.bt,
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
        "build_has_fix": fix in build.construction_plan().fixes,
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
    build: BuildConfig,
    store: DuckDBStore,
    judge: PairwiseJudge,
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Per published defect: its measured effect on this build (module docstring)."""
    fixes = audited_fixes(build)

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        query_ids = store.read_table("queries")["query_id"].to_list()
        k = build.construction.audit_queries
        sample = sample_subset(query_ids, k, build.seed, AUDIT_STREAM)
        rows = []
        for fix in fixes:
            context.log.info(f"sabermath_audit: {fix} on {len(sample)} queries")
            rows.append(_variant(context, build, store, judge, slurm, corpus, sample, fix))
        table = pl.DataFrame(rows, infer_schema_length=None)
        figures = {"fixes": fixes, "queries": len(sample), "audit": table.to_dicts()}
        return StageOutput({"sabermath_audit": table}, figures=figures)

    plan = build.construction_plan()
    settings = {
        "plan": plan.as_provenance(),
        "fixes": fixes,
        "queries": build.construction.audit_queries,
        "seed": build.seed,
        **judge.provenance(),
    }
    return materialize_stage(context, store, settings=settings, compute=compute)


def audit_asset(build: BuildConfig) -> list[dg.AssetsDefinition]:
    """The audit asset when some published defect applies to this build (else none)."""
    if not audited_fixes(build):
        return []
    deps = ["queries", "candidate_pools", "judgments", "bt_ratings"]
    if build.construction_plan().engine == "all_pairs":
        deps = [*INPUTS, "pair_histograms", "target_eligibility", *deps]
    return [
        dg.asset(name="sabermath_audit", group_name="validity", deps=deps, kinds={"duckdb"})(
            sabermath_audit
        )
    ]
