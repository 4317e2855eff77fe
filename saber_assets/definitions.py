"""The single ``Definitions`` of the SABER platform (loaded by ``workspace.yaml``)."""

from __future__ import annotations

import dagster as dg

from saber_assets.annotation import summaries, topic_annotations
from saber_assets.automation import REFRESH_JOB, build_schedules, build_sensors
from saber_assets.discovery import discovery_assets
from saber_assets.evaluation import leaderboard, retriever_runs
from saber_assets.export import benchmark_export, build_manifest_asset, build_report_asset
from saber_assets.inputs import corpus, ontology_asset
from saber_assets.resources import BuildResource, StoreResource
from saber_assets.tournament import tournament_assets
from saber_assets.validity import (
    audit_asset,
    rating_intervals,
    recipe_sensitivity_asset,
    validity_report,
)
from saber_config import BuildConfig, BuildPlan, load_build_config
from saber_llm.base import LLMBackend
from saber_llm.factory import make_backend, make_judge
from saber_runtime.stage import asset_code_versions
from saber_slurm import SlurmDispatch, slurm_dispatch_from_build
from saber_store.database import DuckDBStore

BUILD_JOB = "build_benchmark"
EVAL_JOB = "evaluate_benchmark"
# Dagster's multiprocess executor (steps in parallel processes), each step forked from a server
# that has already imported this module and its libraries — sentence-transformers (and torch)
# included, which the embedding judge and the retrievers need in most steps: a step starts in
# well under a second instead of paying a fresh interpreter and every import (`spawn`, Dagster's
# default). First the server sets passive OpenMP waiting and parses the project's sources for
# the code versions every step computes (saber_assets.forkserver_setup). It only imports: no
# model is loaded and no thread started before a fork; the models load lazily in the steps that
# miss the embedding cache.
# Then the modules of the instance every step opens (Dagster's default: SQLite storage under
# DAGSTER_HOME), imported lazily by each step otherwise (0.3 s per step).
INSTANCE_MODULES = [
    "dagster._core.instance.factory",
    "dagster._core.storage.sqlite_storage",
    "dagster._core.storage.runs.sqlite.sqlite_run_storage",
    "dagster._core.storage.event_log.sqlite.sqlite_event_log",
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
    "dagster._core.storage.local_compute_log_manager",
]
PRELOAD = ["saber_assets.forkserver_setup", __name__, "sentence_transformers", *INSTANCE_MODULES]
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
    built = [
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
    ]
    names = [key.to_user_string() for a in built for key in a.keys]
    assets = [
        *built,
        build_manifest_asset(names),
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
        description="Evaluate one retriever (a partition) on the export and refresh the "
        "leaderboard.",
    )
    refresh_job = dg.define_asset_job(
        REFRESH_JOB,
        selection=dg.AssetSelection.all() - dg.AssetSelection.assets(retriever_runs),
        description="Rebuild and refresh the leaderboard (the schedule's and the sensor's job; "
        "the retriever partitions follow through saber_retriever_eval_sensor).",
    )
    slurm = slurm_dispatch_from_build(plan) if plan.execution == "slurm" else None
    assets = with_stage_versions(assets, plan)
    return dg.Definitions(
        assets=assets,
        jobs=[job, eval_job, refresh_job],
        executor=EXECUTOR,
        schedules=build_schedules(build),
        sensors=build_sensors(build, slurm, EVAL_JOB),
        resources={
            "build": BuildResource.of(build),
            "store": StoreResource(database=str(plan.paths.database)),
            "llm": backend,
            "judge": make_judge(plan, backend),
            "slurm": slurm or SlurmDispatch(),
        },
    )


def with_stage_versions(
    assets: list[dg.AssetsDefinition], plan: BuildPlan
) -> list[dg.AssetsDefinition]:
    """The assets with the code versions the UI compares (:func:`asset_code_versions`): an
    asset whose code or read settings changed since its last materialization shows stale."""
    modules = {}
    for a in assets:
        for key in a.keys:
            modules[key.to_user_string()] = a.op.compute_fn.decorated_fn.__module__
    store = DuckDBStore(database=str(plan.paths.database))
    versions = asset_code_versions(store, plan, modules)

    def versioned(spec: dg.AssetSpec) -> dg.AssetSpec:
        return spec.replace_attributes(code_version=versions[spec.key.to_user_string()])

    return [a.map_asset_specs(versioned) for a in assets]


@dg.definitions
def defs() -> dg.Definitions:
    """Definitions for the profile chosen by ``SABER_PROFILE`` (read when Dagster loads them)."""
    return build_definitions()
