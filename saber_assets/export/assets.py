"""Group ``export``: ``benchmark_export`` (the released files, :mod:`.writer`) and
``build_report`` (``report.md`` with plots, :mod:`.report`)."""

import dagster as dg
import polars as pl

from saber_assets.export.report import judge_warning, ratings_plot, report_markdown, signals_plot
from saber_assets.export.writer import write_export, write_manifest
from saber_assets.resources import BuildResource, StoreResource
from saber_config import PlanReads, unwrap
from saber_core.validity.triage_round import triage_counts
from saber_lineage.provenance import build_manifest
from saber_llm.base import LLMBackend
from saber_llm.embeddings.embedder import model_identity
from saber_llm.judges import PairwiseJudge
from saber_runtime.stage import StageOutput, materialize_stage
from saber_slurm import SlurmDispatch, producing_runs, report_items
from saber_store.database import DuckDBStore


@dg.asset(
    group_name="export",
    deps=[
        "corpus",
        "queries",
        "candidate_pools",
        "bt_ratings",
        "judgments",
        "rating_intervals",
        "summaries",
        "topic_annotations",
    ],
    kinds={"json", "parquet"},
)
def benchmark_export(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """The released benchmark files under ``$SABER_HOME/export``."""
    plan = build.reads()

    def compute() -> StageOutput:
        out = plan.paths.export_dir
        counts = write_export(store, out)
        files = pl.DataFrame({"file": list(counts), "rows": list(counts.values())})
        return StageOutput(
            {"benchmark_export": files.with_columns(pl.lit(str(out)).alias("folder"))},
            figures={"export_dir": str(out), **{f"rows/{k}": v for k, v in counts.items()}},
            files=[out / f for f in counts],
        )

    return materialize_stage(context, store, plan, compute=compute)


def _threshold_items(plan: PlanReads) -> list[tuple]:
    """How high and low were decided, saying whether the numbers are quantiles or values."""
    t = plan.thresholds
    if t.mode == "global_percentile":
        return [("thresholds", "mode", f"global percentile {t.quantile} over all ordered pairs")]
    kind = "quantiles of each query's eligible scores" if t.mode == "quantile" else "values"
    return [
        ("thresholds", "mode", f"per query, {kind}"),
        ("thresholds", "topic high/low", f"{t.topic_high}/{t.topic_low} ({t.mode})"),
        ("thresholds", "summary high/low", f"{t.summary_high}/{t.summary_low} ({t.mode})"),
    ]


def _report_items(plan: PlanReads, store: DuckDBStore, provenance: dict) -> list[tuple]:
    pools, outcomes = store.read_table("candidate_pools"), store.read_table("pool_outcomes")
    judgments = store.read_table("judgments")
    ratings = store.read_table("bt_ratings").join(
        pools.select("query_id", "doc_id", "group"), on=["query_id", "doc_id"]
    )
    status = dict(outcomes.group_by("status").len().rows())
    by_group = ratings.group_by("group").agg(pl.col("rating").mean()).sort("group")
    shown = sorted(judgments["shown_first"].unique().to_list()) if judgments.height else []
    t, r = plan.tournament, plan.rating
    return [
        ("inputs", "corpus", plan.inputs.corpus),
        ("inputs", "ontology", plan.inputs.ontology),
        ("inputs", "corpus rows", str(store.read_table("corpus").height)),
        ("inputs", "quarantined rows", str(store.read_table("corpus_quarantine").height)),
        *[
            ("construction", k, str(v))
            for k, v in unwrap(plan.construction).as_provenance().items()
        ],
        *_threshold_items(plan),
        ("pools", "queries", str(outcomes.height)),
        ("pools", "query status", ", ".join(f"{k}: {v}" for k, v in sorted(status.items()))),
        ("pools", "pool size", "/".join(map(str, plan.pools.sizes))),
        ("pools", "relaxed candidates", str(int(pools["relaxed"].sum()))),
        ("tournament", "pairing", f"{t.pairing} (seed {t.seed})"),
        ("tournament", "shown first (judgments)", ", ".join(shown)),
        ("tournament", "judge calls per pair", str(t.calls_per_judgment)),
        ("tournament", "rounds", str(t.rounds)),
        ("tournament", "judgments", str(judgments.height)),
        ("tournament", "dropped", str(judgments["outcome"].null_count())),
        *_triage_items(plan, judgments),
        ("ratings", "Bradley–Terry", f"{r.fit}, {'soft' if r.soft else 'hard'} outcomes, C {r.c}"),
        *[("ratings", f"mean rating ({g})", f"{m:.3f}") for g, m in by_group.rows()],
        *[("judge", k, "" if v is None else v) for k, v in provenance.items()],
    ]


def _triage_items(plan: PlanReads, judgments: pl.DataFrame) -> list[tuple]:
    """With ``tournament.triage`` on: pairs the grades decided, pairs judged, calls saved."""
    t = plan.tournament
    if t.triage == "off":
        return []
    n = triage_counts(judgments, t.calls_per_judgment)
    share = n["n_decided_by_triage"] / judgments.height if judgments.height else 0.0
    return [
        ("tournament", "triage", f"{t.triage} on grades of {t.pointwise_judge}"),
        ("tournament", "pairs decided by triage", str(n["n_decided_by_triage"])),
        ("tournament", "pairs judged", str(n["n_judged"])),
        ("tournament", "judge calls saved", f"{n['judge_calls_saved_by_triage']} ({share:.0%})"),
    ]


def _audit_items(store: DuckDBStore) -> list[tuple]:
    """The build report's rows for the published-defect audit: the control first (and what it
    means when it does not reproduce the build), then one row per fix."""
    table = store.read_table("sabermath_audit")
    control = table.row(0, named=True)
    exact = control["rating_spearman"] >= 1.0 - 1e-12 and control["bm25_ndcg_shift"] == 0.0
    verdict = (
        "reproduces the build"
        if exact
        else ("DOES NOT reproduce the build: the fixes' numbers below measure the replay too")
    )
    rows = [("published-defect audit", "control (no fix)", verdict)]
    for r in table.iter_rows(named=True):
        control = r["fix"].startswith("control")
        direction = "" if control else (" off (build has it)" if r["build_has_fix"] else " on")
        shift = r["bm25_ndcg_shift"]
        rows.append(
            (
                "published-defect audit",
                f"{r['fix']}{direction}",
                f"pools changed {r['pools_changed']:.0%}, rating Spearman "
                f"{r['rating_spearman']:.3f}, BM25 nDCG@10 shift {shift:+.4f} "
                f"({r['queries']} queries)",
            )
        )
    return rows


def _slurm_items(
    context: dg.AssetExecutionContext, execution: str, store: DuckDBStore, slurm: SlurmDispatch
) -> tuple[list[tuple], dict]:
    """The SLURM cost section (runs that made the current LLM tables), or nothing."""
    runs = producing_runs(store)
    if execution != "slurm" and not runs:
        return [], {}
    try:
        return report_items(slurm, store, runs)
    except Exception as exc:  # the cluster is a report's source here, never a reason to fail
        context.log.warning(f"build report: SLURM costs unavailable ({exc})")
        return [("slurm", "costs", f"unavailable: {exc}")], {}


def build_report(
    context: dg.AssetExecutionContext,
    build: BuildResource,
    store: StoreResource,
    judge: dg.ResourceParam[PairwiseJudge],
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """A Markdown report of the build (inputs, construction, pools, tournament, judge, the
    published-defect audit, SLURM cost) with plots."""
    plan = build.reads()
    provenance = judge.provenance()
    audited = "sabermath_audit" in [
        d.asset_key.to_user_string()
        for d in context.assets_def.specs_by_key[context.asset_key].deps
    ]

    def compute() -> StageOutput:
        out = plan.paths.export_dir
        out.mkdir(parents=True, exist_ok=True)
        slurm_items, slurm_figures = _slurm_items(context, plan.plan.execution, store, slurm)
        items = _report_items(plan, store, provenance)
        items += (_audit_items(store) if audited else []) + slurm_items + _reproduce_items(store)
        pools = store.read_table("candidate_pools")
        ratings = store.read_table("bt_ratings").join(
            pools.select("query_id", "doc_id", "group"), on=["query_id", "doc_id"]
        )
        plots = {
            "ratings_by_group": ratings_plot(ratings, out / "ratings_by_group.png"),
            "pool_signals": signals_plot(pools, out / "pool_signals.png"),
        }
        warning = judge_warning(provenance)
        report = out / "report.md"
        report.write_text(report_markdown(plan.profile, warning, items, plots))
        table = pl.DataFrame(items, schema=["section", "item", "value"], orient="row")
        return StageOutput(
            {"build_report": table},
            figures={"report_path": str(report), "judge_warning": warning, **slurm_figures},
            files=[report],
            plots=plots,
        )

    extra = {"judge": provenance}
    return materialize_stage(context, store, plan, compute=compute, extra=extra)


REPORT_DEPS = ["corpus", "candidate_pools", "judgments", "bt_ratings", "build_manifest"]


def _reproduce_items(store: DuckDBStore) -> list[tuple]:
    """How to make this build again, from the build manifest."""
    made = store.figures_of("build_manifest")
    commit = made.get("commit") or "unknown (no git checkout)"
    dirty = " with uncommitted changes" if made.get("dirty") else ""
    return [
        ("reproduce", "code", f"commit {commit}{dirty}"),
        ("reproduce", "manifest", made["manifest"]),
        ("reproduce", "command", f"saber build --from-manifest {made['manifest']}"),
    ]


def build_report_asset(audited: bool) -> dg.AssetsDefinition:
    """``build_report`` (reading the published-defect audit when the build has one)."""
    deps = [*REPORT_DEPS, *(["sabermath_audit"] if audited else [])]
    return dg.asset(group_name="export", deps=deps, kinds={"markdown"})(build_report)


def _models(plan: PlanReads, llm: LLMBackend, judge: PairwiseJudge) -> dict:
    """The identities of the models behind the labels (the LLM only when a stage uses it)."""
    uses_llm = "llm" in (plan.annotation.summaries, plan.annotation.topics, plan.tournament.judge)
    return {
        "llm": llm.identity() if uses_llm else None,
        "judge": judge.provenance(),
        "embedder": model_identity(),
    }


def build_manifest_asset(upstream: list[str]) -> dg.AssetsDefinition:
    """``build_manifest``: ``manifest.json`` in the export folder — the files, what made the
    build (commit, settings and where they came from, package versions, input and prompt
    hashes, models: :mod:`saber_lineage.provenance`) and the fingerprint and data version of
    every ``upstream`` asset; ``saber build --from-manifest`` rebuilds from it."""

    @dg.asset(name="build_manifest", group_name="export", deps=upstream, kinds={"json"})
    def _manifest(
        context: dg.AssetExecutionContext,
        build: BuildResource,
        store: StoreResource,
        llm: dg.ResourceParam[LLMBackend],
        judge: dg.ResourceParam[PairwiseJudge],
    ) -> dg.MaterializeResult:
        plan = build.reads()
        made = build_manifest(build, _models(plan, llm, judge))

        def compute() -> StageOutput:
            out = plan.paths.export_dir
            files = {k[5:]: v for k, v in store.figures_of("benchmark_export").items()
                     if k.startswith("rows/")}  # fmt: skip
            assets = store.versions_of(upstream)
            path = write_manifest(out, files, made, assets)
            table = pl.DataFrame({"asset": list(assets), **_columns(assets)})
            figures = {"manifest": str(path), "commit": made["code"].get("commit"),
                       "dirty": made["code"].get("dirty")}  # fmt: skip
            return StageOutput({"build_manifest": table}, figures=figures, files=[path])

        return materialize_stage(context, store, plan, compute=compute, extra={"manifest": made})

    return _manifest


def _columns(assets: dict) -> dict:
    return {
        "fingerprint": [v["fingerprint"] for v in assets.values()],
        "data_version": [v["data_version"] for v in assets.values()],
    }
