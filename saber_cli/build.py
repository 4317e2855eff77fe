"""``saber build``: materialize the whole graph in-process, then summarize it."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterable

import dagster as dg
import polars as pl

from saber_assets.definitions import BUILD_JOB, build_definitions
from saber_cli.dagster_home import saber_instance
from saber_config import BuildConfig
from saber_llm.base import LLMBackend
from saber_llm.factory import make_backend
from saber_store.build_lock import build_lock
from saber_store.database import DuckDBStore


def run_build(
    build: BuildConfig,
    dagster_instance: dg.DagsterInstance | None = None,
    backend: LLMBackend | None = None,
    run_id: str | None = None,
    listeners: Iterable[Callable[[dg.EventLogEntry], None]] = (),
    notice: Callable[[str], None] | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize the whole graph in-process, holding the SABER home's build lock.

    The instance defaults to the SABER home's (:func:`saber_cli.dagster_home.saber_instance`:
    the one the UI shows); ``listeners`` receive every event of the run as it happens;
    ``notice`` the lock's messages (:func:`saber_store.build_lock.build_lock`).
    With SLURM execution, the run's allocations are released when the job ends (also when it
    failed, not when it was interrupted: ``saber build``'s supervisor cancels those) and what
    its jobs cost is recorded in ``slurm_run_costs``. ``backend`` replaces the plan's LLM backend
    (tests); either way the one backend is preflighted (:func:`check_engine`) and built with."""
    backend = backend or make_backend(build.plan())
    check_engine(build, backend)
    job = build_definitions(build, backend).resolve_job_def(BUILD_JOB)
    run_id = run_id or str(uuid.uuid4())
    with build_lock(build.home_path, notice):
        instance = dagster_instance or saber_instance(build.home_path)
        for listener in listeners:
            instance.add_event_listener(run_id, listener)
        interrupted = False
        try:
            return job.execute_in_process(instance=instance, raise_on_error=True, run_id=run_id)
        except BaseException as exc:  # an interrupt (not an error): the supervisor stops the run
            interrupted = not isinstance(exc, Exception)
            raise
        finally:
            if build.execution == "slurm" and not interrupted:
                finish_slurm(build, run_id)


def check_engine(build: BuildConfig, backend: LLMBackend) -> None:
    """Before any stage, when the plan runs an LLM stage here (``execution: local``): the backend
    checks what it can (:meth:`LLMBackend.preflight`: vLLM's environment and model folder, else
    ``EngineServerError`` with the fix; nothing is written)."""
    plan = build.plan()
    uses_llm = "llm" in (plan.annotation.summaries, plan.annotation.topics, plan.tournament.judge)
    if plan.execution == "local" and uses_llm:
        backend.preflight()


def finish_slurm(build: BuildConfig, run_id: str) -> dict | None:
    """Release the run's allocations and record its SLURM cost (a warning, never a failure,
    when the cluster cannot be reached: the orphan sensor and the idle timeout release it)."""
    from saber_slurm import finish_run, slurm_dispatch_from_build

    try:
        store = DuckDBStore(database=str(build.database_path))
        return finish_run(slurm_dispatch_from_build(build), store, run_id)
    except Exception as exc:
        print(f"saber build: could not release the run's SLURM allocations: {exc}", file=sys.stderr)
        return None


def slurm_summary(store: DuckDBStore, run_id: str) -> str:
    """What the run's SLURM work cost (allocations, jobs, model loads, GPU-hours, queue wait,
    requests/s and tokens/s per stage)."""
    from saber_slurm import cost_lines, run_jobs, stage_costs, summarize_jobs

    jobs = run_jobs(store, [run_id])
    totals = {"models": jobs["model_key"].n_unique() if not jobs.is_empty() else 0}
    totals.update({"queue_wait_s": 0.0, **summarize_jobs(jobs)})
    return "\n".join(cost_lines(totals, stage_costs(store, [run_id])))


def llm_summary(store: DuckDBStore, run_id: str) -> str | None:
    """What the run paid its LLM per prompt: calls and, where the engine reports it (vLLM),
    the prefix-cache hit rate = cached / prompt tokens; ``None`` when it paid no call."""
    from saber_llm.cache import TABLE

    if not store.has_table(TABLE):
        return None
    with store.connect(read_only=True) as con:
        rows = con.execute(
            f"""SELECT prompt_id, count(*),
                       sum(prompt_tokens) FILTER (WHERE json_exists(extra, '$.cached_tokens')),
                       sum(CAST(json_extract(extra, '$.cached_tokens') AS BIGINT))
                FROM {TABLE} WHERE run_id = ? GROUP BY prompt_id ORDER BY prompt_id""",
            [run_id],
        ).fetchall()
    if not rows:
        return None
    parts = [
        f"{prompt} {calls}" + (f" (prefix-cache hit {cached / tokens:.1%})" if tokens else "")
        for prompt, calls, tokens, cached in rows
    ]
    return "llm:        calls paid by this build: " + ", ".join(parts)


def _top(frame: pl.DataFrame, column: str, n: int = 3) -> str:
    """The ``n`` commonest values of ``column`` with their counts (row-specific details such as
    ``line 3:`` or ``(first at row 0)`` folded away)."""
    values = frame[column].cast(pl.String).fill_null("(none)")
    values = values.str.replace(r"^line \d+: ", "").str.replace(r"\s*\(.*\)$", "")
    counts = values.value_counts(sort=True).head(n)
    return ", ".join(f"{value} {count}" for value, count in counts.rows())


def attention(store: DuckDBStore) -> list[str]:
    """What a user should look at after a build: quarantined corpus rows, documents without a
    summary or topics, rejected topic ids, documents left out of the databank and dropped
    judgments — counts, the commonest reasons and the table to read."""
    lines = []
    quarantine = store.read_table("corpus_quarantine")
    reasons = (
        f" (table corpus_quarantine: {_top(quarantine, 'reason')})" if quarantine.height else ""
    )
    lines.append(f"quarantine: {quarantine.height} corpus rows{reasons}")
    summaries = store.read_table("summaries").filter(pl.col("summary").is_null())
    if summaries.height:
        lines.append(
            f"summaries:  {summaries.height} documents without one (table summaries, column "
            f"summary_status: {_top(summaries, 'summary_status')})"
        )
    rejected = store.read_table("topic_rejections")
    ids, docs = rejected["topic_id"].is_not_null().sum(), rejected["topic_id"].is_null().sum()
    if ids or docs:
        lines.append(
            f"topics:     {ids} topic ids rejected, {docs} documents without topics (table "
            f"topic_rejections: {_top(rejected, 'reason')})"
        )
    if store.has_table("databank_exclusions"):
        excluded = store.read_table("databank_exclusions")
        if excluded.height:
            lines.append(
                f"databank:   {excluded.height} documents left out (table databank_exclusions: "
                f"{_top(excluded, 'reason')})"
            )
    return lines


def summary(store: DuckDBStore, export_dir: os.PathLike) -> str:
    """A short human summary of a finished build."""
    outcomes = store.read_table("pool_outcomes")
    pools = store.read_table("candidate_pools")
    judgments = store.read_table("judgments")
    ratings = store.read_table("bt_ratings")
    spread = ratings.group_by("query_id").agg(pl.col("rating").std())["rating"]
    status = dict(outcomes.group_by("status").len().sort("status").rows())
    dropped = judgments.filter(pl.col("outcome").is_null())
    why = (
        f": table judgments, column drop_reason: {_top(dropped, 'drop_reason')}"
        if dropped.height
        else ""
    )
    return "\n".join(
        [
            f"queries:    {outcomes.height} ({', '.join(f'{k} {v}' for k, v in status.items())})",
            f"pools:      {pools.height} candidates, {int(pools['relaxed'].sum())} relaxed",
            f"judgments:  {judgments.height} ({dropped.height} dropped{why})",
            f"ratings:    {ratings.height}, mean {ratings['rating'].mean():.2f}, "
            f"mean within-query std {spread.mean():.2f}",
            *attention(store),
            f"export:     {export_dir}",
        ]
    )
