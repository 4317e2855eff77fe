"""Group ``evaluation``: retriever runs on the build's export and the leaderboard (thin
wrappers over ``saber_eval``).

``retriever_runs`` evaluates the configured retrievers and settings (default: bm25, jaccard,
random, st:minilm on statement→full) on the export folder and writes run files, per-query CSVs
and summaries under ``$SABER_HOME/eval/<export>-<hash>/``; its data identity is the export's
content hash, so it also works on a folder written by ``saber export`` or by another project.
Under ``execution: slurm`` each retriever is evaluated as one SLURM job (one model load per
job, sized from its registry entry's ``resources``) and its run files come back into the same
folder. ``leaderboard`` rebuilds the leaderboard (DuckDB tables, CSV, Markdown, plots) from
every run summary in that folder, ``saber eval`` runs included: ``ndcg@10`` and
``ndcg@10_trec`` with seeded paired-bootstrap 95% intervals, and the rank-stability table
(``rank_stability``). Both log to MLflow under ``$SABER_HOME/mlruns``.
"""

from pathlib import Path

import dagster as dg
import yaml
from pydantic import Field

from saber_eval import node_job
from saber_eval.benchmark import MAIN_SETTING, parse_settings
from saber_eval.leaderboard import mteb_result_files, refresh_leaderboard, summary_files
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import retriever_factory
from saber_eval.runner import (
    METRIC,
    TREC_METRIC,
    eval_dir,
    evaluate_specs,
    result_tables,
    retriever_slug,
    stored_tables,
)
from saber_eval.tracking import log_result, log_run
from saber_eval.version import code_hash
from saber_resources.config import BuildConfig
from saber_resources.slurm import SlurmDispatch
from saber_resources.slurm.eval_jobs import EvalJob, run_eval_job
from saber_resources.store.database import DuckDBStore, stable_hash
from saber_runtime.stage import StageOutput, materialize_stage

DEFAULT_RETRIEVERS = ["bm25", "jaccard", "random", "st:minilm"]
NODE_PAYLOAD = Path(node_job.__file__).resolve()


class RetrieverRunsConfig(dg.Config):
    """Which retrievers and settings to evaluate, on which folder (empty = the build's export)."""

    retrievers: list[str] = Field(default_factory=lambda: list(DEFAULT_RETRIEVERS))
    settings: list[str] = Field(default_factory=lambda: [MAIN_SETTING])
    benchmark: str = ""
    mlflow: bool = True


class LeaderboardConfig(dg.Config):
    """Whether the leaderboard files and plots are also logged as one MLflow run."""

    mlflow: bool = True


def export_of(store: DuckDBStore, paths) -> Path:
    """The build's export folder as ``benchmark_export`` recorded it (an export folder written
    by other means, with no such record, is the home's export folder)."""
    try:
        return Path(store.figures_of("benchmark_export")["export_dir"])
    except RuntimeError:
        return paths.export_dir


@dg.asset(group_name="evaluation", deps=["benchmark_export"], kinds={"python", "mlflow"})
def retriever_runs(
    context: dg.AssetExecutionContext,
    config: RetrieverRunsConfig,
    build: BuildConfig,
    store: DuckDBStore,
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Per query and retriever × setting: nDCG@10 and reranking latency; TREC run files."""
    plan = build.reads()
    paths = plan.plan.paths  # the benchmark's content hash names what is evaluated
    benchmark = load_benchmark(
        Path(config.benchmark) if config.benchmark else export_of(store, paths)
    )
    settings, registry = parse_settings(config.settings), load_registry()
    folder = eval_dir(paths.eval_dir, benchmark)

    def compute() -> StageOutput:
        if plan.plan.execution == "slurm":
            jobs = [
                slurm_job(spec, benchmark, settings, folder, plan.seed, registry)
                for spec in config.retrievers
            ]
            stats = [run_eval_job(slurm, context, job) for job in jobs]
            per_query, summaries = stored_tables(folder, config.retrievers, settings)
            figures = {f"slurm_job/{s['spec']}": s["slurm_job_id"] for s in stats}
        else:
            make = retriever_factory(paths.embedding_cache, seed=plan.seed, registry=registry)
            results = evaluate_specs(
                benchmark,
                config.retrievers,
                settings,
                folder,
                registry=registry,
                make=make,
                log=context.log.info,
            )
            for result in results if config.mlflow else []:
                log_result(result, paths.mlruns)
            per_query, summaries = result_tables(results, folder)
            figures = {}
        figures |= {"benchmark_hash": benchmark.hash, "eval_dir": str(folder)}
        for r in summaries.iter_rows(named=True):
            key = f"{r['retriever']}/{r['setting']}"
            figures[f"{METRIC}/{key}"] = round(r[METRIC], 4)
            figures[f"{TREC_METRIC}/{key}"] = round(r[TREC_METRIC], 4)
            figures[f"median_latency_s/{key}"] = round(r["median_latency_s"], 6)
        files = [Path(p) for p in summaries["run_file"]]
        tables = {"retriever_runs": per_query, "retriever_run_summaries": summaries}
        return StageOutput(tables, figures=figures, files=files)

    extra = {
        "retrievers": list(config.retrievers),
        "settings": settings,
        "benchmark_hash": benchmark.hash,
        "eval_dir": str(folder),
        "registry": registry.hash,
        "eval_code": code_hash(),
        "mlflow": config.mlflow,
        "execution": plan.plan.execution,
    }
    return materialize_stage(
        context, store, plan, compute=compute, extra=extra, track_upstream=False
    )


def slurm_job(spec, benchmark, settings, folder: Path, seed: int, registry) -> EvalJob:
    """The SLURM job of one retriever (its registry entry, shipped with it, sizes it)."""
    entry = registry.get(spec)
    registry_file = folder / "jobs" / f"retrievers-{retriever_slug(spec)}.yaml"
    registry_file.parent.mkdir(parents=True, exist_ok=True)
    registry_file.write_text(yaml.safe_dump({"retrievers": {spec: entry.as_item()}}))
    return EvalJob(
        spec=spec,
        slug=retriever_slug(spec),
        label=benchmark.label,
        benchmark_dir=Path(benchmark.path),
        registry=registry_file,
        settings=tuple(settings),
        seed=seed,
        local_folder=folder,
        resources=registry.get(spec).resources,
        payload=NODE_PAYLOAD,
    )


@dg.asset(group_name="evaluation", deps=["retriever_runs"], kinds={"duckdb", "mlflow"})
def leaderboard(
    context: dg.AssetExecutionContext,
    config: LeaderboardConfig,
    build: BuildConfig,
    store: DuckDBStore,
) -> dg.MaterializeResult:
    """Leaderboard (nDCG@10 and nDCG@10_trec with 95% intervals, per domain, median latency),
    rank stability and plots."""
    plan = build.reads()
    summaries = store.read_table("retriever_run_summaries")
    folder, benchmark_hash = Path(summaries["eval_dir"][0]), summaries["benchmark_hash"][0]
    registry = load_registry()
    runs = {
        p.relative_to(folder).as_posix(): stable_hash(p.read_text())
        for p in [*summary_files(folder), *mteb_result_files(folder)]
    }

    def compute() -> StageOutput:
        board = refresh_leaderboard(folder, registry)
        if config.mlflow:
            log_run(
                plan.plan.paths.mlruns,
                run_name=f"leaderboard · {folder.name}",
                params={"benchmark_hash": benchmark_hash, "rows": board.frame.height}
                | {f"bootstrap_{k}": v for k, v in board.bootstrap.items()},
                metrics={},
                artifacts=[*board.files.values(), *board.plots.values()],
                tags={"saber.benchmark": benchmark_hash},
            )
        best = board.frame.sort(METRIC, descending=True).group_by("setting", maintain_order=True)
        figures = {
            f"best/{s}": f"{r} ({v:.3f})"
            for s, r, v in best.first().select("setting", "retriever", METRIC).rows()
        }
        figures |= {
            f"top_stays/{t['setting']}/{t['metric']}": f"{t['top']} ({t['top_stays']:.3f})"
            for t in board.top_stays
        }
        figures |= {f"file/{k}": str(v) for k, v in board.files.items()}
        return StageOutput(
            {"leaderboard": board.frame, "rank_stability": board.stability},
            figures=figures,
            files=[board.files[k] for k in ("csv", "markdown", "stability_markdown")],
            plots=board.plots,
        )

    extra = {
        "eval_dir": str(folder),
        "runs": runs,
        "registry": registry.hash,
        "eval_code": code_hash(),
        "mlflow": config.mlflow,
    }
    return materialize_stage(context, store, plan, compute=compute, extra=extra)
