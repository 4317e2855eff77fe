"""``saber evaluate``: evaluate retrievers as partitions of ``retriever_runs`` — the platform
path (the UI shows each partition; under ``execution: slurm`` each one is a SLURM job) — then
refresh the leaderboard.

    saber evaluate --retriever SPEC [--retriever SPEC …] [--setting S …] [--profile P]

Every spec is made and preflighted first (engine, options, model folder, device, server): a bad
one is one line naming the fix and nothing is added or run. A spec that is not a partition yet
is added (``retrievers``); each partition runs in its own Dagster run of the
``evaluate_benchmark`` job on the SABER home's instance, then one run refreshes the leaderboard.
"""

from __future__ import annotations

import argparse

import dagster as dg

from saber_assets.definitions import EVAL_JOB, build_definitions
from saber_assets.evaluation import RETRIEVERS, leaderboard, retriever_runs
from saber_cli.dagster_home import saber_instance
from saber_config import BuildConfig
from saber_eval.benchmark import MAIN_SETTING, SETTINGS, parse_settings
from saber_eval.engines.base import EngineError
from saber_eval.registry import load_registry
from saber_eval.retrievers import make_retriever


def preflight(specs: list[str]) -> None:
    """Make and preflight every retriever (no model loads); ``EngineError`` on the first bad one."""
    registry = load_registry()
    for spec in specs:
        make_retriever(spec, entry=registry.get(spec)).preflight()


def evaluate(
    build: BuildConfig, specs: list[str], settings: list[str], instance: dg.DagsterInstance
) -> list[dg.ExecuteInProcessResult]:
    """One run per retriever partition, then one leaderboard run; returns the runs."""
    job = build_definitions(build).resolve_job_def(EVAL_JOB)
    known = set(instance.get_dynamic_partitions(RETRIEVERS.name))
    new = [s for s in specs if s not in known]
    if new:
        instance.add_dynamic_partitions(RETRIEVERS.name, new)
    config = {"ops": {"retriever_runs": {"config": {"settings": settings}}}}
    runs = [
        job.execute_in_process(
            instance=instance,
            partition_key=spec,
            run_config=config,
            asset_selection=[retriever_runs.key],
            raise_on_error=False,
        )
        for spec in specs
    ]
    runs.append(
        job.execute_in_process(
            instance=instance,
            partition_key=specs[-1],
            asset_selection=[leaderboard.key],
            raise_on_error=False,
        )
    )
    return runs


def evaluate_main(argv: list[str]) -> int:
    """Entry point of ``saber evaluate`` (returns the exit code)."""
    from saber_cli.config_errors import load_config

    parser = argparse.ArgumentParser(prog="saber evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", action="append", required=True, metavar="SPEC")
    parser.add_argument("--setting", action="append", choices=[*SETTINGS, "all"])
    parser.add_argument("--profile", help="profile name or YAML path (default: SABER_PROFILE)")
    args = parser.parse_args(argv)
    build = load_config("evaluate", args.profile)
    specs = list(dict.fromkeys(args.retriever))
    settings = [s for name in args.setting or [MAIN_SETTING] for s in parse_settings(name)]
    try:
        preflight(specs)
    except (EngineError, FileNotFoundError) as exc:
        raise SystemExit(f"saber evaluate: {exc}") from None
    runs = evaluate(build, specs, settings, saber_instance(build.home_path))
    for spec, run in zip([*specs, "leaderboard"], runs, strict=True):
        print(f"{spec}: {'ok' if run.success else 'FAILED'} (run {run.run_id})")
    board = build.home_path / "eval"
    print(f"leaderboard: {next(board.glob('*/leaderboard.md'), board)}")
    return 0 if all(r.success for r in runs) else 1
