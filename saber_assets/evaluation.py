"""Stage: retriever evaluation on the build's export — runs, leaderboard, plots, MLflow.

Thin wrappers over ``saber_eval``. ``retriever_runs`` evaluates the configured retrievers and
settings (default: bm25, jaccard, random, st:minilm on statement→full) on the export folder and
writes run files, per-query CSVs and summaries under ``$SABER_HOME/eval/<export>-<hash>/``;
its data identity is the export's content hash, so it also works on a folder written by
``saber export`` or by another project. ``leaderboard`` rebuilds the leaderboard (DuckDB table,
CSV, Markdown, plots) from every run summary in that folder, ``saber eval`` runs included.
"""

import json
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field

from saber_assets.runtime import StageOutput, materialize_stage
from saber_eval import code_hash
from saber_eval.benchmark import MAIN_SETTING, load_benchmark, parse_settings
from saber_eval.cli import retriever_factory
from saber_eval.leaderboard import refresh_leaderboard, summary_files
from saber_eval.registry import load_registry
from saber_eval.runner import METRIC, eval_dir, evaluate_specs
from saber_resources.config import BuildConfig
from saber_resources.storage import DuckDBStore, stable_hash

DEFAULT_RETRIEVERS = ["bm25", "jaccard", "random", "st:minilm"]
DEFAULT_SETTINGS = [MAIN_SETTING]


class RetrieverRunsConfig(dg.Config):
    """Which retrievers and settings to evaluate, on which folder (empty = the build's export)."""

    retrievers: list[str] = Field(default_factory=lambda: list(DEFAULT_RETRIEVERS))
    settings: list[str] = Field(default_factory=lambda: list(DEFAULT_SETTINGS))
    benchmark: str = ""
    mlflow: bool = True


class LeaderboardConfig(dg.Config):
    """Whether the leaderboard files and plots are also logged as one MLflow run."""

    mlflow: bool = True


def _mlflow_store(build: BuildConfig) -> str:
    return str(build.home_path / "mlruns")


@dg.asset(group_name="evaluation", deps=["benchmark_export"], kinds={"python", "mlflow"})
def retriever_runs(
    context: dg.AssetExecutionContext,
    config: RetrieverRunsConfig,
    build: BuildConfig,
    store: DuckDBStore,
) -> dg.MaterializeResult:
    """Per query and retriever × setting: nDCG@10 and reranking latency; TREC run files."""
    benchmark = load_benchmark(Path(config.benchmark) if config.benchmark else build.export_dir)
    settings = parse_settings(config.settings)
    registry = load_registry()
    folder = eval_dir(build.home_path / "eval", benchmark)

    def compute() -> StageOutput:
        make = retriever_factory(build.home_path / "cache" / "eval_cache.duckdb", seed=build.seed)
        results = evaluate_specs(
            benchmark,
            config.retrievers,
            settings,
            folder,
            registry=registry,
            make=make,
            log=context.log.info,
        )
        if config.mlflow:
            from saber_eval.tracking import log_result

            for result in results:
                log_result(result, _mlflow_store(build))
        per_query = pl.concat(
            [
                r.per_query().select(
                    pl.lit(r.spec).alias("retriever"), pl.lit(r.setting).alias("setting"), pl.all()
                )
                for r in results
            ]
        )
        summaries = pl.DataFrame(
            [
                {
                    "retriever": r.spec,
                    "setting": r.setting,
                    "display_name": r.entry.display_name,
                    "kind": r.entry.kind,
                    METRIC: r.mean,
                    "median_latency_s": r.median_latency_s,
                    "n_queries": len(r.query_ids),
                    "per_domain": json.dumps(r.per_domain, sort_keys=True),
                    "run_file": str(r.files["run_file"]),
                    "eval_dir": str(folder),
                    "benchmark_hash": benchmark.hash,
                }
                for r in results
            ]
        )
        figures = {"benchmark_hash": benchmark.hash, "eval_dir": str(folder)}
        for r in results:
            figures[f"{METRIC}/{r.spec}/{r.setting}"] = round(r.mean, 4)
            figures[f"median_latency_s/{r.spec}/{r.setting}"] = round(r.median_latency_s, 6)
        files = [p for r in results for p in r.files.values()]
        return StageOutput(
            {"retriever_runs": per_query, "retriever_run_summaries": summaries},
            figures=figures,
            files=files,
        )

    return materialize_stage(
        context,
        store,
        settings={
            "retrievers": list(config.retrievers),
            "settings": settings,
            "benchmark_hash": benchmark.hash,
            "eval_dir": str(folder),
            "registry": registry.hash,
            "eval_code": code_hash(),
            "seed": build.seed,
            "mlflow": config.mlflow,
        },
        upstream=[],
        compute=compute,
    )


@dg.asset(group_name="evaluation", deps=["retriever_runs"], kinds={"duckdb", "mlflow"})
def leaderboard(
    context: dg.AssetExecutionContext,
    config: LeaderboardConfig,
    build: BuildConfig,
    store: DuckDBStore,
) -> dg.MaterializeResult:
    """Leaderboard (nDCG@10 overall and per domain, median latency) with its plots."""
    summaries = store.read_table("retriever_run_summaries")
    folder = Path(summaries["eval_dir"][0])
    registry = load_registry()
    runs = {
        p.relative_to(folder).as_posix(): stable_hash(p.read_text()) for p in summary_files(folder)
    }

    def compute() -> StageOutput:
        board = refresh_leaderboard(folder, registry)
        if config.mlflow:
            from saber_eval.tracking import log_run

            log_run(
                _mlflow_store(build),
                run_name=f"leaderboard · {folder.name}",
                params={
                    "benchmark_hash": summaries["benchmark_hash"][0],
                    "rows": board.frame.height,
                },
                metrics={},
                artifacts=[*board.files.values(), *board.plots.values()],
                tags={"saber.benchmark": summaries["benchmark_hash"][0]},
            )
        best = (
            board.frame.sort(METRIC, descending=True)
            .group_by("setting", maintain_order=True)
            .first()
        )
        figures = {
            f"best/{s}": f"{r} ({v:.3f})"
            for s, r, v in best.select("setting", "retriever", METRIC).rows()
        }
        figures |= {f"file/{k}": str(v) for k, v in board.files.items()}
        return StageOutput(
            {"leaderboard": board.frame},
            figures=figures,
            files=[board.files["csv"], board.files["markdown"]],
            plots=board.plots,
        )

    return materialize_stage(
        context,
        store,
        settings={
            "eval_dir": str(folder),
            "runs": runs,
            "registry": registry.hash,
            "eval_code": code_hash(),
        },
        upstream=["retriever_runs"],
        compute=compute,
    )
