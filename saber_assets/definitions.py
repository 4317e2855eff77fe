"""The single ``Definitions`` of the SABER platform (loaded by ``workspace.yaml``)."""

from __future__ import annotations

import os

import dagster as dg

from saber_assets.annotations import summaries, topic_annotations
from saber_assets.corpus import corpus, ontology
from saber_assets.evaluation import leaderboard, retriever_runs
from saber_assets.export import benchmark_export
from saber_assets.pools import candidate_pools
from saber_assets.recipe import recipe_sensitivity
from saber_assets.report import build_report
from saber_assets.schedules import build_schedules, build_sensors
from saber_assets.similarity import queries, summary_similarity, topic_similarity
from saber_assets.tournament import make_judgment_assets
from saber_assets.validity import rating_intervals, validity_report
from saber_resources.config import BuildConfig, load_build_config
from saber_resources.judge import EmbeddingJudge, LexicalJudge, LLMJudge, PairwiseJudge
from saber_resources.llm.base import LLMBackend
from saber_resources.llm.embedded import EmbeddedBackend
from saber_resources.llm.openai_compat import OpenAICompatibleBackend
from saber_resources.llm.vllm_backend import VLLMBackend
from saber_resources.slurm import SlurmDispatch, slurm_dispatch_from_build
from saber_resources.storage import DuckDBStore

BUILD_JOB = "build_benchmark"
EVAL_JOB = "evaluate_benchmark"
API_KEY_ENV = "SABER_API_KEY"


def make_backend(build: BuildConfig) -> LLMBackend:
    """The LLM backend named by the build config (the API key only through ``EnvVar``)."""
    if build.llm_backend == "embedded":
        return EmbeddedBackend()
    if build.llm_backend == "openai":
        key = dg.EnvVar(API_KEY_ENV) if os.environ.get(API_KEY_ENV) else ""
        return OpenAICompatibleBackend(
            base_url=build.llm_base_url,
            model=build.llm_model,
            api_key=key,
            max_concurrency=build.llm_max_concurrency,
            reasoning_effort=build.llm_reasoning_effort,
        )
    return VLLMBackend(
        model=build.llm_model,
        tensor_parallel_size=build.llm_tensor_parallel,
        reasoning_effort=build.llm_reasoning_effort,
    )


def make_judge(build: BuildConfig, backend: LLMBackend) -> PairwiseJudge:
    """The pairwise judge named by the build config."""
    if build.judge == "embedding":
        return EmbeddingJudge()
    if build.judge == "lexical":
        return LexicalJudge()
    return LLMJudge(
        backend=backend,
        mode=build.judge_mode,
        both_orders=build.judge_both_orders,
        max_tokens=build.judge_max_tokens,
        seed=build.seed,
    )


def build_definitions(
    build: BuildConfig | None = None, backend: LLMBackend | None = None
) -> dg.Definitions:
    """Every asset, check, job and resource for one build config (default: the profile).

    ``backend`` replaces the configured LLM backend (tests swap in recorded or fake ones).
    """
    build = build or load_build_config()
    backend = backend or make_backend(build)
    assets = [
        corpus,
        ontology,
        summaries,
        topic_annotations,
        queries,
        topic_similarity,
        summary_similarity,
        candidate_pools,
        *make_judgment_assets(build.rounds),
        rating_intervals,
        benchmark_export,
        recipe_sensitivity,
        validity_report,
        build_report,
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
    slurm = slurm_dispatch_from_build(build) if build.execution == "slurm" else None
    return dg.Definitions(
        assets=assets,
        jobs=[job, eval_job],
        schedules=build_schedules(build),
        sensors=build_sensors(build, slurm),
        resources={
            "build": build,
            "store": DuckDBStore(database=str(build.database_path)),
            "llm": backend,
            "judge": make_judge(build, backend),
            "slurm": slurm or SlurmDispatch(),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Definitions for the profile chosen by ``SABER_PROFILE`` (read when Dagster loads them)."""
    return build_definitions()
