"""Group ``evaluation``: retriever runs on the build's export and the leaderboard (thin
wrappers over ``saber_eval``).

``retriever_runs`` is partitioned by retriever: one Dagster partition per registry spec
(dynamic partitions ``retrievers``: the default retrievers are added by
``saber_retriever_partitions_sensor``, any other spec when it is first asked for — ``saber
evaluate --retriever SPEC`` or "Add partition" in the UI). A partition evaluates its spec on the
configured settings (default statement→full) of the export folder and writes run files,
per-query CSVs and summaries under ``$SABER_HOME/eval/<export>-<hash>/``; its data identity is
the export's content hash, so it also works on a folder written by ``saber export`` or by
another project. Under ``execution: slurm`` a partition runs as one SLURM job (one model load,
sized from its registry entry's ``resources``) and its run files come back into the same folder.

``leaderboard`` reads every evaluated partition and rebuilds the leaderboard (DuckDB tables,
CSV, Markdown, plots) from every run summary in that folder, ``saber eval`` runs included:
``ndcg@10`` and ``ndcg@10_trec`` with seeded paired-bootstrap 95% intervals, and the
rank-stability table (``rank_stability``); its ``retrievers`` table says which partitions are
evaluated, missing (never evaluated on this export) or stale (evaluated with other code,
registry entry or settings). Both log to MLflow under ``$SABER_HOME/mlruns``.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import yaml
from pydantic import Field

from saber_assets.resources import BuildResource, StoreResource
from saber_eval import node_job
from saber_eval.benchmark import MAIN_SETTING, Benchmark, parse_settings
from saber_eval.leaderboard import mteb_result_files, refresh_leaderboard, summary_files
from saber_eval.loading import load_benchmark
from saber_eval.registry import Registry, load_registry
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
from saber_runtime.stage import StageOutput, materialize_stage
from saber_slurm import SlurmDispatch
from saber_slurm.eval_jobs import EvalJob, run_eval_job
from saber_store.database import DuckDBStore, stable_hash

DEFAULT_RETRIEVERS = ["bm25", "jaccard", "random", "st:minilm"]
RETRIEVERS = dg.DynamicPartitionsDefinition(name="retrievers")
NODE_PAYLOAD = Path(node_job.__file__).resolve()


class RetrieverRunsConfig(dg.Config):
    """Which settings to evaluate, on which folder (empty = the build's export)."""

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


def partition_entry(spec: str) -> str:
    """The manifest entry of one retriever's partition: ``retriever_runs[<spec>]``."""
    return f"retriever_runs[{spec}]"


def partition_tables(spec: str) -> tuple[str, str]:
    """The per-query and summary tables of one retriever's partition."""
    slug = retriever_slug(spec).replace("-", "_").replace(".", "_")
    return f"retriever_runs__{slug}", f"retriever_run_summaries__{slug}"


def run_identity(benchmark: Benchmark, registry: Registry, spec: str, settings) -> dict:
    """What a partition's runs depend on besides the plan (its fingerprint's ``extra``)."""
    return {
        "spec": spec,
        "entry": stable_hash(registry.get(spec).as_item()),
        "settings": list(settings),
        "benchmark_hash": benchmark.hash,
        "eval_code": code_hash(),
    }


@dg.asset(
    group_name="evaluation",
    deps=["benchmark_export"],
    partitions_def=RETRIEVERS,
    kinds={"python", "mlflow"},
)
def retriever_runs(
    context: dg.AssetExecutionContext,
    config: RetrieverRunsConfig,
    build: BuildResource,
    store: StoreResource,
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """One retriever (the partition) × settings: nDCG@10 per query, latency, TREC run files."""
    plan, spec = build.reads(), context.partition_key
    paths = plan.plan.paths  # the benchmark's content hash names what is evaluated
    benchmark = load_benchmark(
        Path(config.benchmark) if config.benchmark else export_of(store, paths)
    )
    settings, registry = parse_settings(config.settings), load_registry()
    folder = eval_dir(paths.eval_dir, benchmark)
    names = partition_tables(spec)

    def compute() -> StageOutput:
        if plan.plan.execution == "slurm":
            job = slurm_job(spec, benchmark, settings, folder, plan.seed, registry)
            stats = run_eval_job(slurm, context, job)
            per_query, summaries = stored_tables(folder, [spec], settings)
            figures = {"slurm_job_id": stats["slurm_job_id"], "slurm_node": stats["slurm_node"]}
        else:
            per_query, summaries = evaluate_here(
                context, plan, spec, benchmark, settings, folder, registry, config.mlflow
            )
            figures = {}
        figures |= run_figures(summaries) | {"benchmark_hash": benchmark.hash}
        files = [Path(p) for p in summaries["run_file"]]
        return StageOutput(dict(zip(names, (per_query, summaries), strict=True)), figures, files)

    extra = run_identity(benchmark, registry, spec, settings) | {
        "eval_dir": str(folder),
        "mlflow": config.mlflow,
        "execution": plan.plan.execution,
    }
    return materialize_stage(
        context,
        store,
        plan,
        compute=compute,
        extra=extra,
        track_upstream=False,
        key=partition_entry(spec),
    )


def evaluate_here(context, plan, spec, benchmark, settings, folder, registry, mlflow: bool):
    """(per-query rows, summaries) of one retriever evaluated in this process."""
    paths = plan.plan.paths
    make = retriever_factory(paths.embedding_cache, seed=plan.seed, registry=registry)
    results = evaluate_specs(
        benchmark, [spec], settings, folder, registry=registry, make=make, log=context.log.info
    )
    for result in results if mlflow else []:
        log_result(result, paths.mlruns)
    return result_tables(results, folder)


def run_figures(summaries: pl.DataFrame) -> dict[str, Any]:
    """nDCG@10, nDCG@10_trec and median latency per setting (asset metadata)."""
    figures: dict[str, Any] = {}
    for r in summaries.iter_rows(named=True):
        figures[f"{METRIC}/{r['setting']}"] = round(r[METRIC], 4)
        figures[f"{TREC_METRIC}/{r['setting']}"] = round(r[TREC_METRIC], 4)
        figures[f"median_latency_s/{r['setting']}"] = round(r["median_latency_s"], 6)
    return figures


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
        resources=entry.resources,
        payload=NODE_PAYLOAD,
    )


def retriever_status(
    store: DuckDBStore, specs: list[str], benchmark: Benchmark, registry: Registry
) -> pl.DataFrame:
    """Per partition: ``evaluated`` (its runs are this export's, with today's code and registry
    entry), ``stale`` (evaluated, but with other code, entry or export) or ``missing``."""
    rows = []
    for spec in specs:
        entry = store.manifest_entry(partition_entry(spec))
        if entry is None:
            rows.append({"spec": spec, "status": "missing", "why": "never evaluated"})
            continue
        then = entry["metadata"]["extra"]
        now = run_identity(benchmark, registry, spec, then.get("settings", []))
        moved = [k for k in now if then.get(k) != now[k]]
        status = "stale" if moved else "evaluated"
        rows.append(
            {"spec": spec, "status": status, "why": ", ".join(moved) + " changed" if moved else ""}
        )
    return pl.DataFrame(rows, schema={"spec": pl.String, "status": pl.String, "why": pl.String})


def evaluated_runs(store: DuckDBStore, status: pl.DataFrame) -> pl.DataFrame:
    """The per-query rows of every evaluated partition (``retriever, setting, query_id, …``)."""
    frames = [
        store.read_table(partition_tables(s)[0])
        for s in status.filter(pl.col("status") != "missing")["spec"]
    ]
    return pl.concat(frames) if frames else pl.DataFrame({"retriever": [], "setting": []})


@dg.asset(
    group_name="evaluation",
    deps=[
        dg.AssetDep("retriever_runs", partition_mapping=dg.AllPartitionMapping()),
        "benchmark_export",  # which export's evaluation folder it reads
    ],
    kinds={"duckdb", "mlflow"},
)
def leaderboard(
    context: dg.AssetExecutionContext,
    config: LeaderboardConfig,
    build: BuildResource,
    store: StoreResource,
) -> dg.MaterializeResult:
    """Leaderboard (nDCG@10 and nDCG@10_trec with 95% intervals, per domain, median latency),
    rank stability, plots, and which retrievers are evaluated, missing or stale."""
    plan = build.reads()
    benchmark = load_benchmark(export_of(store, plan.plan.paths))
    folder, registry = eval_dir(plan.plan.paths.eval_dir, benchmark), load_registry()
    specs = context.instance.get_dynamic_partitions(RETRIEVERS.name)
    runs = {
        p.relative_to(folder).as_posix(): stable_hash(p.read_text())
        for p in [*summary_files(folder), *mteb_result_files(folder)]
    }

    def compute() -> StageOutput:
        status = retriever_status(store, specs, benchmark, registry)
        board = refresh_leaderboard(folder, registry)
        if config.mlflow:
            log_board(board, plan.plan.paths.mlruns, folder, benchmark.hash)
        tables = {
            "leaderboard": board.frame,
            "rank_stability": board.stability,
            "retrievers": status,
            "leaderboard_runs": evaluated_runs(store, status),
        }
        figures = board_figures(board) | {f"retrievers/{k}": v for k, v in counts(status).items()}
        files = [board.files[k] for k in ("csv", "markdown", "stability_markdown")]
        return StageOutput(tables, figures=figures, files=files, plots=board.plots)

    extra = {
        "eval_dir": str(folder),
        "runs": runs,
        "registry": registry.hash,
        "eval_code": code_hash(),
        "mlflow": config.mlflow,
        "partitions": sorted(specs),
        "evaluated": {
            s: (store.manifest_entry(partition_entry(s)) or {}).get("data_version") for s in specs
        },
    }
    return materialize_stage(
        context, store, plan, compute=compute, extra=extra, track_upstream=False
    )


def counts(status: pl.DataFrame) -> dict[str, int]:
    """How many partitions are evaluated, missing and stale."""
    return {k: int((status["status"] == k).sum()) for k in ("evaluated", "missing", "stale")}


def log_board(board, mlruns: Path, folder: Path, benchmark_hash: str) -> None:
    """The leaderboard's files and plots as one MLflow run."""
    log_run(
        mlruns,
        run_name=f"leaderboard · {folder.name}",
        params={"benchmark_hash": benchmark_hash, "rows": board.frame.height}
        | {f"bootstrap_{k}": v for k, v in board.bootstrap.items()},
        metrics={},
        artifacts=[*board.files.values(), *board.plots.values()],
        tags={"saber.benchmark": benchmark_hash},
    )


def board_figures(board) -> dict[str, Any]:
    """The best retriever per setting, whether the top stays, and the board's files."""
    best = board.frame.sort(METRIC, descending=True).group_by("setting", maintain_order=True)
    figures = {
        f"best/{s}": f"{r} ({v:.3f})"
        for s, r, v in best.first().select("setting", "retriever", METRIC).rows()
    }
    figures |= {
        f"top_stays/{t['setting']}/{t['metric']}": f"{t['top']} ({t['top_stays']:.3f})"
        for t in board.top_stays
    }
    return figures | {f"file/{k}": str(v) for k, v in board.files.items()}
