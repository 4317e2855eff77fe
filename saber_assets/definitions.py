"""The single ``Definitions`` of the SABER platform (loaded by ``workspace.yaml``)."""

from __future__ import annotations

import dagster as dg

from saber_assets.annotations import summaries, topic_annotations
from saber_assets.corpus import corpus, ontology
from saber_assets.export import benchmark_export
from saber_assets.pools import candidate_pools
from saber_assets.report import build_report
from saber_assets.similarity import queries, summary_similarity, topic_similarity
from saber_assets.tournament import make_judgment_assets
from saber_resources.config import BuildConfig, load_build_config
from saber_resources.judge import EmbeddingJudge, PairwiseJudge
from saber_resources.storage import DuckDBStore

BUILD_JOB = "build_benchmark"


def make_judge(build: BuildConfig) -> PairwiseJudge:
    """The pairwise judge named by the build config."""
    if build.judge == "embedding":
        return EmbeddingJudge()
    raise ValueError(f"unknown judge {build.judge!r}")


def build_definitions(build: BuildConfig | None = None) -> dg.Definitions:
    """Every asset, check, job and resource for one build config (default: the profile)."""
    build = build or load_build_config()
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
        benchmark_export,
        build_report,
    ]
    job = dg.define_asset_job(
        BUILD_JOB, selection=dg.AssetSelection.all(), description="The whole SABER build."
    )
    return dg.Definitions(
        assets=assets,
        jobs=[job],
        resources={
            "build": build,
            "store": DuckDBStore(database=str(build.database_path)),
            "judge": make_judge(build),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Definitions for the profile chosen by ``SABER_PROFILE`` (read when Dagster loads them)."""
    return build_definitions()
