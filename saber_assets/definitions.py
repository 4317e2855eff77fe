"""The single ``Definitions`` of the SABER platform (loaded by ``workspace.yaml``)."""

from __future__ import annotations

import dagster as dg

from saber_assets.annotation import summaries, topic_annotations
from saber_assets.automation import build_schedules, build_sensors
from saber_assets.discovery import discovery_assets
from saber_assets.evaluation import leaderboard, retriever_runs
from saber_assets.export import benchmark_export, build_report_asset
from saber_assets.inputs import corpus, ontology_asset
from saber_assets.tournament import tournament_assets
from saber_assets.validity import (
    audit_asset,
    rating_intervals,
    recipe_sensitivity_asset,
    validity_report,
)
from saber_resources.config import BuildConfig, load_build_config
from saber_resources.factory import make_backend, make_judge
from saber_resources.llm.base import LLMBackend
from saber_resources.slurm import SlurmDispatch, slurm_dispatch_from_build
from saber_resources.store.database import DuckDBStore

BUILD_JOB = "build_benchmark"
EVAL_JOB = "evaluate_benchmark"
# Dagster's multiprocess executor (steps in parallel processes), each step forked from a server
# that has already imported this module and its libraries — sentence-transformers (and torch)
# included, which the embedding judge and the retrievers need in most steps: a step starts in
# well under a second instead of paying a fresh interpreter and every import (`spawn`, Dagster's
# default). The forkserver only imports them: no model is loaded and no thread started before a
# fork; the models load lazily in the steps that miss the embedding cache.
PRELOAD = [__name__, "sentence_transformers"]
EXECUTOR = dg.multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": PRELOAD}}}, name="saber_multiprocess"
)


def build_definitions(
    build: BuildConfig | None = None, backend: LLMBackend | None = None
) -> dg.Definitions:
    """Every asset, check, job and resource for one build config (default: the profile).

    ``backend`` replaces the configured LLM backend (tests swap in recorded or fake ones).
    """
    build = build or load_build_config()
    plan = build.plan()
    backend = backend or make_backend(plan)
    audit = audit_asset(build)
    steps = plan.construction
    assets = [
        corpus,
        ontology_asset(steps.ontology_source == "tag_paths" or plan.engine == "all_pairs"),
        summaries,
        topic_annotations,
        *discovery_assets(build),
        *tournament_assets(plan.tournament.rounds),
        rating_intervals,
        benchmark_export,
        recipe_sensitivity_asset(plan.engine),
        *audit,
        validity_report,
        build_report_asset(bool(audit)),
        retriever_runs,
        leaderboard,
    ]
    job = dg.define_asset_job(
        BUILD_JOB,
        selection=dg.AssetSelection.all() - dg.AssetSelection.groups("evaluation"),
        description="The whole SABER build.",
    )
    eval_job = dg.define_asset_job(
        EVAL_JOB,
        selection=dg.AssetSelection.groups("evaluation"),
        description="Evaluate retrievers on the export and refresh the leaderboard.",
    )
    slurm = slurm_dispatch_from_build(plan) if plan.execution == "slurm" else None
    return dg.Definitions(
        assets=assets,
        jobs=[job, eval_job],
        executor=EXECUTOR,
        schedules=build_schedules(build),
        sensors=build_sensors(build, slurm),
        resources={
            "build": build,
            "store": DuckDBStore(database=str(plan.paths.database)),
            "llm": backend,
            "judge": make_judge(plan, backend),
            "slurm": slurm or SlurmDispatch(),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Definitions for the profile chosen by ``SABER_PROFILE`` (read when Dagster loads them)."""
    return build_definitions()
