"""``saber build``: materialize the whole graph in-process, then summarize it."""

from __future__ import annotations

import os

import dagster as dg
import polars as pl

from saber_assets.definitions import BUILD_JOB, build_definitions
from saber_resources.config import BuildConfig
from saber_resources.llm.base import LLMBackend
from saber_resources.storage import DuckDBStore, build_lock


def instance() -> dg.DagsterInstance:
    """The Dagster instance under ``DAGSTER_HOME`` (run history kept), else an ephemeral one."""
    return (
        dg.DagsterInstance.get()
        if os.environ.get("DAGSTER_HOME")
        else dg.DagsterInstance.ephemeral()
    )


def run_build(
    build: BuildConfig,
    dagster_instance: dg.DagsterInstance | None = None,
    backend: LLMBackend | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize the whole graph in-process, holding the SABER home's build lock."""
    job = build_definitions(build, backend).resolve_job_def(BUILD_JOB)
    with build_lock(build.home_path):
        return job.execute_in_process(instance=dagster_instance or instance(), raise_on_error=True)


def summary(store: DuckDBStore, export_dir: os.PathLike) -> str:
    """A short human summary of a finished build."""
    outcomes = store.read_table("pool_outcomes")
    pools = store.read_table("candidate_pools")
    judgments = store.read_table("judgments")
    ratings = store.read_table("bt_ratings")
    spread = ratings.group_by("query_id").agg(pl.col("rating").std())["rating"]
    status = dict(outcomes.group_by("status").len().sort("status").rows())
    return "\n".join(
        [
            f"queries:    {outcomes.height} ({', '.join(f'{k} {v}' for k, v in status.items())})",
            f"pools:      {pools.height} candidates, {int(pools['relaxed'].sum())} relaxed",
            f"judgments:  {judgments.height} ({judgments['outcome'].null_count()} dropped)",
            f"ratings:    {ratings.height}, mean {ratings['rating'].mean():.2f}, "
            f"mean within-query std {spread.mean():.2f}",
            f"export:     {export_dir}",
        ]
    )
