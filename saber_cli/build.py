"""``saber build``: materialize the whole graph in-process, then summarize it."""

from __future__ import annotations

import os
import sys
import uuid

import dagster as dg
import polars as pl

from saber_assets.definitions import BUILD_JOB, build_definitions
from saber_resources.config import BuildConfig
from saber_resources.llm.base import LLMBackend
from saber_resources.store.database import DuckDBStore, build_lock


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
    run_id: str | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize the whole graph in-process, holding the SABER home's build lock.

    With SLURM execution, the run's allocations are released when the job ends (also when it
    failed, not when it was interrupted: ``saber build``'s supervisor cancels those) and what
    its jobs cost is recorded in ``slurm_run_costs``."""
    check_engine(build, backend)
    job = build_definitions(build, backend).resolve_job_def(BUILD_JOB)
    run_id = run_id or str(uuid.uuid4())
    with build_lock(build.home_path):
        interrupted = False
        try:
            return job.execute_in_process(
                instance=dagster_instance or instance(), raise_on_error=True, run_id=run_id
            )
        except BaseException as exc:  # an interrupt (not an error): the supervisor stops the run
            interrupted = not isinstance(exc, Exception)
            raise
        finally:
            if build.execution == "slurm" and not interrupted:
                finish_slurm(build, run_id)


def check_engine(build: BuildConfig, backend: LLMBackend | None) -> None:
    """Before any stage: an engine that runs here in its own environment (vLLM under
    ``execution: local``) must have that environment and its model folder, else
    ``EngineServerError`` with the fix (nothing is written)."""
    uses_llm = "llm" in (
        build.annotation.summaries,
        build.annotation.topics,
        build.tournament.judge,
    )
    if build.execution != "local" or not uses_llm:
        return
    if backend is None and build.llm.backend == "vllm":
        from saber_resources.factory import make_backend

        backend = make_backend(build.plan())
    preflight = getattr(backend, "preflight", None)
    if preflight is not None:
        preflight()


def finish_slurm(build: BuildConfig, run_id: str) -> dict | None:
    """Release the run's allocations and record its SLURM cost (a warning, never a failure,
    when the cluster cannot be reached: the orphan sensor and the idle timeout release it)."""
    from saber_resources.slurm import finish_run, slurm_dispatch_from_build

    try:
        store = DuckDBStore(database=str(build.database_path))
        return finish_run(slurm_dispatch_from_build(build), store, run_id)
    except Exception as exc:
        print(f"saber build: could not release the run's SLURM allocations: {exc}", file=sys.stderr)
        return None


def slurm_summary(store: DuckDBStore, run_id: str) -> str:
    """What the run's SLURM work cost (allocations, jobs, model loads, GPU-hours, queue wait,
    requests/s and tokens/s per stage)."""
    from saber_resources.slurm import cost_lines, run_jobs, stage_costs, summarize_jobs

    jobs = run_jobs(store, [run_id])
    totals = {"models": jobs["model_key"].n_unique() if not jobs.is_empty() else 0}
    totals.update({"queue_wait_s": 0.0, **summarize_jobs(jobs)})
    return "\n".join(cost_lines(totals, stage_costs(store, [run_id])))


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
