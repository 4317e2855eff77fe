"""``saber eval``: evaluate retrievers on a benchmark directory, refresh its leaderboard, compare.

    saber eval --benchmark DIR|hf:NAME[:REVISION] --retriever SPEC [--retriever SPEC …]
               [--setting statement-statement|statement-full|full-full|all] [--out DIR]
               [--via saber|mteb] [--mteb-scores FILE [--since DATE]] [--bootstrap N]
               [--registry FILE … | --registry-only FILE …]
               [--compare A B] [--cache FILE] [--mlflow URI|DIR | --no-mlflow] [--seed N]

``--benchmark hf:NAME[:REVISION]`` reads the released SaberMath schema from the Hugging Face
hub through ``datasets.load_dataset`` (offline: from the datasets cache;
:func:`saber_eval.sabermath_format.load_hf_sabermath`). ``--registry FILE`` (repeatable) merges
registry files over ``retrievers.yaml`` (an entry of the same spec is replaced wholesale);
``--registry-only FILE`` uses only the given files.

``--via mteb`` also runs the real ``mteb`` package (offline) on the benchmark written as an MTEB
reranking task (``<out>/<benchmark>/mteb_task/<setting>/``) for every ``st:`` retriever and
records its nDCG@10 next to ours (``mteb/<slug>/<setting>.json``, leaderboard column
``ndcg@10_mteb``). ``--mteb-scores FILE`` correlates the leaderboard with given MTEB scores:
Pearson r, Spearman ρ and Kendall τ-b with their p-values and n, over all matched models and,
with ``--since YYYY[-MM[-DD]]``, over those whose registry release date is on or after it
(:mod:`saber_eval.correlation`). The leaderboard's bootstrap intervals use ``--bootstrap``
resamples (default 10,000) seeded by ``--seed``; its rank-stability table tests every adjacent
pair and reports the raw and the Holm-adjusted p (:mod:`saber_eval.stability`).

Defaults come from the build config (``SABER_HOME``): benchmark ``$SABER_HOME/export``, output
``$SABER_HOME/eval``, caches ``$SABER_HOME/cache/eval_cache.duckdb`` (embeddings and LLM calls),
MLflow file store ``$SABER_HOME/mlruns``. Results land in ``<out>/<benchmark>-<hash[:8]>/``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import polars as pl

from saber_eval.benchmark import MAIN_SETTING, SETTINGS, Benchmark, parse_settings
from saber_eval.engines.base import Retriever
from saber_eval.leaderboard import Leaderboard, refresh_leaderboard
from saber_eval.loading import load_benchmark
from saber_eval.registry import REGISTRY_PATH, Registry, load_registries, parse_date
from saber_eval.retrievers import retriever_factory
from saber_eval.runner import METRIC, RunResult, eval_dir, evaluate_specs, retriever_slug
from saber_eval.significance import Comparison, compare
from saber_eval.stability import N_RESAMPLES, BootstrapSettings
from saber_llm.embeddings.cache import EmbeddingCache
from saber_store.paths import SaberPaths


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


def run_via_mteb(
    benchmark: Benchmark,
    results: Sequence[RunResult],
    folder: Path,
    *,
    registry: Registry,
    cache: EmbeddingCache,
    log: Callable[[str], None] = print,
) -> dict[str, Path]:
    """For every ``st:`` result: write the MTEB task of its setting (once), run ``mteb`` on it
    and record mteb's scores next to ours under its label convention."""
    from saber_eval.mteb_task import (
        MTEBRun,
        mteb_results_path,
        ndcg_mteb_convention,
        run_mteb,
        write_mteb_result,
        write_mteb_task,
    )

    written: dict[str, Path] = {}
    tasks: dict[str, Path] = {}
    for result in results:
        if not result.spec.startswith("st:"):
            log(f"mteb: skipping {result.spec} (--via mteb runs st: bi-encoders)")
            continue
        if result.setting not in tasks:
            tasks[result.setting] = folder / "mteb_task" / result.setting
            write_mteb_task(benchmark, tasks[result.setting], result.setting)
        before_encoded, before_hits = cache.encoded, cache.hits
        scores, _ = run_mteb(tasks[result.setting], result.spec, cache, registry.get(result.spec))
        run = MTEBRun(
            spec=result.spec,
            setting=result.setting,
            scores=scores,
            ours=float(np.mean(ndcg_mteb_convention(benchmark, result.scores))),
            encoded=cache.encoded - before_encoded,
            served_from_cache=cache.hits - before_hits,
        )
        path = mteb_results_path(folder, retriever_slug(result.spec), result.setting)
        written[f"{result.spec}/{result.setting}"] = write_mteb_result(run, path)
        log(
            f"mteb · {run.spec} · {run.setting}: mteb nDCG@10 {run.mteb_ndcg:.5f} "
            f"(0–100 labels, linear gain); ours under that convention {run.ours:.5f}; "
            f"texts encoded {run.encoded}, from the embedding cache {run.served_from_cache}"
        )
    return written


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
    bootstrap: BootstrapSettings | None = None,
    via_mteb: EmbeddingCache | None = None,
) -> tuple[list[RunResult], Leaderboard]:
    """Evaluate, (with ``via_mteb`` = the embedding cache: run mteb on the ``st:`` results),
    refresh the leaderboard and plots, log each run to MLflow (when given)."""
    folder = eval_dir(out, benchmark)
    results = evaluate_specs(
        benchmark, specs, settings, folder, registry=registry, make=make, log=log
    )
    if via_mteb is not None:
        run_via_mteb(benchmark, results, folder, registry=registry, cache=via_mteb, log=log)
    board = refresh_leaderboard(folder, registry, bootstrap=bootstrap)
    if mlflow:
        from saber_eval.tracking import log_result

        files = [p for k, p in board.files.items() if k != "duckdb"]
        for result in results:
            log_result(result, mlflow, plots=board.plots.values(), board=board, files=files)
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
        "--benchmark",
        metavar="DIR|hf:NAME[:REVISION]",
        help="export-format or released-schema folder (default: the build's), or hf:NAME for "
        "the released schema on the Hugging Face hub (offline: its datasets cache)",
    )
    parser.add_argument(
        "--retriever",
        action="append",
        default=[],
        metavar="SPEC",
        help="bm25 | jaccard | random | PREFIX:MODEL with a prefix of st, vllm, openai, ce, "
        "vllm-score, seqcls, llm, yesno, colbert, mteb, run — or a registry entry naming its "
        "engine (repeatable; docs/evaluation.md)",
    )
    parser.add_argument(
        "--setting", default=MAIN_SETTING, choices=[*SETTINGS, "all"], help="task setting"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: $SABER_HOME/eval)")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="paired test of two specs")
    parser.add_argument("--permutations", type=int, default=10_000, help="randomization samples")
    parser.add_argument("--cache", type=Path, help="embedding/LLM cache DuckDB file")
    registry = parser.add_mutually_exclusive_group()
    registry.add_argument(
        "--registry",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="registry file merged over retrievers.yaml; its entries replace the default's of "
        "the same spec (repeatable, later files win)",
    )
    registry.add_argument(
        "--registry-only",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="use only these registry files, not retrievers.yaml (repeatable)",
    )
    parser.add_argument("--mlflow", help="MLflow tracking URI or folder ($SABER_HOME/mlruns)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    parser.add_argument("--seed", type=int, default=0, help="seed of random, bootstrap, tests")
    parser.add_argument(
        "--via",
        choices=["saber", "mteb"],
        default="saber",
        help="mteb: also run the mteb package on the benchmark as an MTEB task (st: retrievers)",
    )
    parser.add_argument(
        "--mteb-scores", type=Path, metavar="FILE", help="CSV retriever,mteb_score to correlate"
    )
    parser.add_argument(
        "--since",
        type=since_date,
        metavar="DATE",
        help="with --mteb-scores: also correlate the models released on or after DATE "
        "(YYYY, YYYY-MM or YYYY-MM-DD; registry release_date)",
    )
    parser.add_argument(
        "--bootstrap", type=int, default=N_RESAMPLES, help="bootstrap resamples of the intervals"
    )
    parser.add_argument("--profile", help="build profile whose SABER home gives the defaults")
    return parser


def since_date(value: str) -> date:
    """``--since``: ``YYYY``, ``YYYY-MM`` (day 1) or ``YYYY-MM-DD``."""
    try:
        parsed = parse_date(value)
    except ValueError:
        parsed = None
    if parsed is None:
        raise argparse.ArgumentTypeError(f"{value!r}: use YYYY, YYYY-MM or YYYY-MM-DD")
    return parsed


def eval_main(argv: list[str]) -> int:
    """Entry point of ``saber eval`` (returns the exit code)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.retriever and not args.compare and not args.mteb_scores:
        parser.error("give --retriever SPEC, --compare A B and/or --mteb-scores FILE")
    if args.since and not args.mteb_scores:
        parser.error("--since selects models for --mteb-scores FILE; give that too")
    defaults = default_paths(args.profile)
    benchmark = load_benchmark(args.benchmark or defaults.benchmark)
    settings = parse_settings(args.setting)
    out = args.out or defaults.out
    mlflow = None if args.no_mlflow else (args.mlflow or defaults.mlflow)
    registry = load_registries(args.registry_only or args.registry, only=bool(args.registry_only))
    cache = EmbeddingCache(args.cache or defaults.cache)
    make = retriever_factory(
        args.cache or defaults.cache, seed=args.seed, registry=registry, cache=cache
    )
    bootstrap = BootstrapSettings(n_resamples=args.bootstrap, seed=args.seed)
    folder = eval_dir(out, benchmark)
    print(f"benchmark: {benchmark.path} ({len(benchmark.queries)} queries, hash {benchmark.hash})")
    registry_files = args.registry_only or [REGISTRY_PATH, *args.registry]
    print(f"registry: {' + '.join(map(str, registry_files))} (hash {registry.hash})")
    specs = list(dict.fromkeys(args.retriever))
    if args.compare:  # evaluate what the comparison needs and has not been evaluated yet
        specs += [
            s
            for s in args.compare
            if s not in specs and any(per_query_ndcg(folder, s, st) is None for st in settings)
        ]
    if specs:
        _, board = run_evaluation(
            benchmark,
            specs,
            settings,
            out,
            registry=registry,
            make=make,
            mlflow=mlflow,
            bootstrap=bootstrap,
            via_mteb=cache if args.via == "mteb" else None,
        )
        print(f"leaderboard: {board.files['markdown']}")
        print(f"rank stability: {board.files['stability_markdown']}")
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
    if args.mteb_scores:
        correlate_with_mteb(
            folder, args.mteb_scores, settings[0], registry, bootstrap, mlflow, args.since
        )
    return 0


def correlate_with_mteb(
    folder: Path,
    scores: Path,
    setting: str,
    registry: Registry,
    bootstrap: BootstrapSettings,
    mlflow: str | None,
    since: date | None = None,
) -> dict:
    """Pearson/Spearman/Kendall of the stored leaderboard vs an MTEB-score CSV, over all
    matched models and those released since ``since`` (+ plot, MLflow)."""
    from saber_eval.correlation import describe, write_correlation

    board = refresh_leaderboard(folder, registry, plots=False, bootstrap=bootstrap)
    stats, files = write_correlation(board.frame, scores, folder, setting, since)
    for subset in stats["subsets"]:
        print("\n".join(describe(subset, setting)))
    print(f"correlation: {files['json']}; plot {files['plot']}")
    if mlflow:
        from saber_eval.tracking import log_run

        metrics = {
            f"{'' if s['subset'] == 'all' else 'since_'}{k}": s[k]
            for s in stats["subsets"]
            for k in ("n", "pearson_r", "spearman", "kendall_tau_b")
            if s[k] is not None
        }
        log_run(
            mlflow,
            run_name=f"mteb correlation · {folder.name}",
            params={"setting": setting, "scores_file": str(scores), "since": stats["since"] or ""},
            metrics=metrics,
            artifacts=list(files.values()),
        )
    return stats
