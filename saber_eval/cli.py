"""``saber eval``: evaluate retrievers on a benchmark directory, refresh its leaderboard, compare.

    saber eval --benchmark DIR --retriever SPEC [--retriever SPEC …]
               [--setting statement-statement|statement-full|full-full|all] [--out DIR]
               [--compare A B] [--cache FILE] [--mlflow URI|DIR | --no-mlflow] [--seed N]

Defaults come from the build config (``SABER_HOME``): benchmark ``$SABER_HOME/export``, output
``$SABER_HOME/eval``, caches ``$SABER_HOME/cache/eval_cache.duckdb`` (embeddings and LLM calls),
MLflow file store ``$SABER_HOME/mlruns``. Results land in ``<out>/<benchmark>-<hash[:8]>/``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from saber_eval.benchmark import MAIN_SETTING, SETTINGS, Benchmark, load_benchmark, parse_settings
from saber_eval.leaderboard import Leaderboard, refresh_leaderboard
from saber_eval.registry import Registry, load_registry
from saber_eval.retrievers import Retriever, retriever_factory
from saber_eval.runner import METRIC, RunResult, eval_dir, evaluate_specs, retriever_slug
from saber_eval.significance import Comparison, compare
from saber_resources.paths import SaberPaths


@dataclass(frozen=True)
class EvalPaths:
    """Where an evaluation reads and writes."""

    benchmark: Path
    out: Path
    cache: Path
    mlflow: str | None


def default_paths(profile: str | None = None) -> EvalPaths:
    """Defaults under the build's SABER home (``$SABER_HOME``, else the profile's ``home``)."""
    paths = SaberPaths.for_profile(profile)
    return EvalPaths(
        benchmark=paths.export_dir,
        out=paths.eval_dir,
        cache=paths.embedding_cache,
        mlflow=str(paths.mlruns),
    )


def run_evaluation(
    benchmark: Benchmark,
    specs: Sequence[str],
    settings: Sequence[str],
    out: Path,
    *,
    registry: Registry,
    make: Callable[[str], Retriever],
    mlflow: str | None = None,
    log: Callable[[str], None] = print,
) -> tuple[list[RunResult], Leaderboard]:
    """Evaluate, refresh the leaderboard and plots, log each run to MLflow (when given)."""
    folder = eval_dir(out, benchmark)
    results = evaluate_specs(
        benchmark, specs, settings, folder, registry=registry, make=make, log=log
    )
    board = refresh_leaderboard(folder, registry)
    if mlflow:
        from saber_eval.tracking import log_result

        for result in results:
            log_result(result, mlflow, plots=board.plots.values())
    return results, board


def per_query_ndcg(folder: Path, spec: str, setting: str) -> pl.DataFrame | None:
    """``query_id, ndcg@10`` of a stored run, or None when it was not evaluated."""
    path = folder / "runs" / retriever_slug(spec) / f"{setting}.per_query.csv"
    if not path.exists():
        return None
    return pl.read_csv(path, schema_overrides={"query_id": pl.String}).select("query_id", METRIC)


def compare_stored(
    folder: Path, a: str, b: str, setting: str, n_permutations: int = 10_000, seed: int = 0
) -> Comparison:
    """Paired comparison of two stored runs over the queries both evaluated."""
    left, right = per_query_ndcg(folder, a, setting), per_query_ndcg(folder, b, setting)
    if left is None or right is None:
        missing = [s for s, f in ((a, left), (b, right)) if f is None]
        raise FileNotFoundError(f"no stored {setting} run for {missing} under {folder}")
    joined = left.join(right, on="query_id", suffix="_b")
    return compare(
        a,
        b,
        setting,
        joined[METRIC].to_numpy(),
        joined[f"{METRIC}_b"].to_numpy(),
        n_permutations=n_permutations,
        seed=seed,
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``saber eval``."""
    parser = argparse.ArgumentParser(
        prog="saber eval",
        description="Evaluate retrievers on a SABER benchmark directory (nDCG@10, latency).",
    )
    parser.add_argument(
        "--benchmark", type=Path, help="export-format folder (default: the build's)"
    )
    parser.add_argument(
        "--retriever",
        action="append",
        default=[],
        metavar="SPEC",
        help="bm25 | jaccard | random | st:<model> | ce:<model> | llm:<profile> (repeatable)",
    )
    parser.add_argument(
        "--setting", default=MAIN_SETTING, choices=[*SETTINGS, "all"], help="task setting"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: $SABER_HOME/eval)")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="paired test of two specs")
    parser.add_argument("--permutations", type=int, default=10_000, help="randomization samples")
    parser.add_argument("--cache", type=Path, help="embedding/LLM cache DuckDB file")
    parser.add_argument("--registry", type=Path, help="retriever registry (retrievers.yaml)")
    parser.add_argument("--mlflow", help="MLflow tracking URI or folder ($SABER_HOME/mlruns)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    parser.add_argument("--seed", type=int, default=0, help="seed of random and significance")
    parser.add_argument("--profile", help="build profile whose SABER home gives the defaults")
    return parser


def eval_main(argv: list[str]) -> int:
    """Entry point of ``saber eval`` (returns the exit code)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.retriever and not args.compare:
        parser.error("give --retriever SPEC and/or --compare A B")
    defaults = default_paths(args.profile)
    benchmark = load_benchmark(args.benchmark or defaults.benchmark)
    settings = parse_settings(args.setting)
    out = args.out or defaults.out
    mlflow = None if args.no_mlflow else (args.mlflow or defaults.mlflow)
    registry = load_registry(args.registry)
    make = retriever_factory(args.cache or defaults.cache, seed=args.seed)
    folder = eval_dir(out, benchmark)
    print(f"benchmark: {benchmark.path} ({len(benchmark.queries)} queries, hash {benchmark.hash})")
    specs = list(dict.fromkeys(args.retriever))
    if args.compare:  # evaluate what the comparison needs and has not been evaluated yet
        specs += [
            s
            for s in args.compare
            if s not in specs and any(per_query_ndcg(folder, s, st) is None for st in settings)
        ]
    if specs:
        _, board = run_evaluation(
            benchmark, specs, settings, out, registry=registry, make=make, mlflow=mlflow
        )
        print(f"leaderboard: {board.files['markdown']}")
        for name, path in board.plots.items():
            print(f"plot {name}: {path}")
        if mlflow:
            from saber_eval.tracking import tracking_uri

            print(f"mlflow: {tracking_uri(mlflow)} (experiment saber-eval)")
    if args.compare:
        a, b = args.compare
        target = folder / "comparisons"
        target.mkdir(parents=True, exist_ok=True)
        for setting in settings:
            result = compare_stored(folder, a, b, setting, args.permutations, args.seed)
            print(result.describe())
            name = f"{retriever_slug(a)}__vs__{retriever_slug(b)}.{setting}.json"
            (target / name).write_text(json.dumps(result.as_dict(), indent=2))
    return 0
