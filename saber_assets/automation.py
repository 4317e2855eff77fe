"""Scheduled and input-triggered rebuilds, and the SLURM orphan sensor.

* ``build_schedules(build)``: the ``refresh_benchmark`` job (the build and the evaluation: a
  scheduled rebuild also refreshes the retriever runs and the leaderboard) on
  ``build.rebuild_cron`` (e.g. weekly ``0 3 * * 1``) when the profile sets one. The run uses the
  profile the code location was loaded with (``SABER_PROFILE=cluster``), so the LLM stages go to
  SLURM when that profile says so.
* ``build_sensors(build, slurm)``: ``saber_input_change_sensor`` requests the same job when an
  input changes — the corpus, ontology, contamination corpus and recipe-summaries files and
  every prompt file — cursor = mtime, size and sha256 per file; a changed mtime with the same
  content only moves the cursor; the first tick records a baseline. With SLURM execution,
  also ``saber_slurm_orphan_sensor``: dagster-slurm's orphan reconciliation (runs whose
  supervisor died while their SLURM job lives on are marked failed and relaunched; the relaunch
  reattaches to the job), plus ``scancel`` for orphaned jobs of runs that cannot be relaunched,
  plus the release of LLM-server allocations whose run ended (runs from the UI); it ticks every
  ``slurm_orphan_poll_seconds`` (default 120) over the one shared SSH connection.

Rebuilds are cheap when little changed: every asset reuses its stored tables when its inputs,
config and code are unchanged, and every LLM call is answered from the DuckDB call cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

BUILD_JOB = "build_benchmark"
REFRESH_JOB = "refresh_benchmark"  # the build and the leaderboard (retrievers: their sensor)
BUILTIN_INPUTS = {"champ", "synthetic", "auto", "none", ""}


def watched_inputs(build: Any) -> list[Path]:
    """Every file a build reads that lives on disk: the corpus, ontology, contamination corpus
    and recipe summaries (when files) and every prompt file of the build's prompt folder."""
    from saber_llm.prompts import PROMPTS_DIR

    names = [
        build.inputs.corpus,
        build.inputs.ontology,
        build.validity.contamination_corpus,
        build.validity.recipe_summaries,
    ]
    files = [Path(n).expanduser().resolve() for n in names if n not in BUILTIN_INPUTS]
    prompts = Path(build.inputs.prompts_dir) if build.inputs.prompts_dir else PROMPTS_DIR
    return files + sorted(p.resolve() for p in prompts.glob("*.md") if p.name != "README.md")


def file_fingerprint(path: Path, previous: dict | None = None) -> dict[str, Any]:
    """``mtime_ns``, ``size`` and ``sha256`` of a file (hash reused when stat is unchanged)."""
    stat = path.stat()
    if (
        previous
        and previous.get("mtime_ns") == stat.st_mtime_ns
        and previous.get("size") == stat.st_size
        and previous.get("sha256")
    ):
        return dict(previous)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size, "sha256": digest.hexdigest()}


def evaluate_inputs(paths: Sequence[Path], cursor: str | None) -> tuple[list[str], str, list[str]]:
    """(changed files, new cursor, missing files) for the input-change sensor.

    A file counts as changed only when its content hash differs from the cursor's; a file seen
    for the first time (no cursor entry) is a baseline, not a change.
    """
    old: dict[str, dict] = json.loads(cursor) if cursor else {}
    new: dict[str, dict] = {}
    changed, missing = [], []
    for path in paths:
        key = str(path)
        if not path.is_file():
            missing.append(key)
            if key in old:
                new[key] = old[key]
            continue
        new[key] = file_fingerprint(path, old.get(key))
        if key in old and old[key].get("sha256") != new[key]["sha256"]:
            changed.append(key)
    return changed, json.dumps(new, sort_keys=True), missing


def build_schedules(build: Any, job: str = REFRESH_JOB) -> list[dg.ScheduleDefinition]:
    """The rebuild schedule when ``build.rebuild_cron`` is set (running by default), else none:
    the build and the evaluation, so the leaderboard follows the labels."""
    cron = build.automation.rebuild_cron
    if not cron:
        return []
    return [
        dg.ScheduleDefinition(
            name="saber_rebuild_schedule",
            cron_schedule=cron,
            job_name=job,
            execution_timezone=os.environ.get("SABER_TIMEZONE", "UTC"),
            default_status=dg.DefaultScheduleStatus.RUNNING,
            tags={"saber/trigger": "schedule", "saber/profile": build.profile},
            description=f"Rebuild the benchmark and refresh the leaderboard ({cron}); unchanged "
            "stages are reused.",
        )
    ]


def input_change_sensor(build: Any, job: str = REFRESH_JOB) -> dg.SensorDefinition:
    """A sensor requesting ``job`` when an input file's content changes (:func:`watched_inputs`)."""
    paths = watched_inputs(build)
    watch = build.automation.watch_inputs and bool(paths)

    @dg.sensor(
        name="saber_input_change_sensor",
        job_name=job,
        minimum_interval_seconds=build.automation.watch_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if watch else dg.DefaultSensorStatus.STOPPED,
        description="Rebuild and refresh the leaderboard when an input file or a prompt changes "
        "(sha256 cursor).",
    )
    def _sensor(context: dg.SensorEvaluationContext):
        changed, cursor, missing = evaluate_inputs(paths, context.cursor)
        first = context.cursor is None
        context.update_cursor(cursor)
        if missing:
            context.log.warning(f"input file(s) missing: {missing}")
        if first:
            return dg.SkipReason(f"baseline recorded for {[str(p) for p in paths]}")
        if not changed:
            return dg.SkipReason("inputs unchanged")
        digest = hashlib.sha256(cursor.encode()).hexdigest()[:16]
        return dg.RunRequest(
            run_key=f"inputs-{digest}",
            tags={"saber/trigger": "input-change", "saber/changed": ",".join(changed)[:200]},
        )

    return _sensor


def slurm_orphan_sensor(
    slurm: Any,
    job: str = BUILD_JOB,
    stale_after_seconds: float = 300.0,
    interval_seconds: int = 120,
) -> dg.SensorDefinition:
    """dagster-slurm's orphan reconciliation for ``job`` plus the release of LLM-server
    allocations whose run has ended, every ``interval_seconds`` (SSH config resolved at tick
    time).

    ``slurm`` is a ``SlurmDispatch``. Runs of ``job`` are relaunched and reattach to their SLURM
    job; orphans of other jobs (e.g. single assets launched from the UI) are ``scancel``-ed; an
    allocation whose run finished (succeeded, failed or was canceled) is released. Every command
    of a tick goes over the one shared SSH ControlMaster connection (``ControlPersist``: 10 min),
    so a tick opens no connection of its own.
    """
    from dagster_slurm import reconcile_orphaned_slurm_runs
    from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

    from saber_slurm import finished_allocation_runs, release_run

    @dg.sensor(
        name="saber_slurm_orphan_sensor",
        job_name=job,
        minimum_interval_seconds=interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Fail runs whose supervisor died; relaunch them to reattach to SLURM jobs; "
        "release the LLM-server allocations of runs that ended.",
    )
    def _sensor(context: dg.SensorEvaluationContext):
        resource = slurm.slurm_resource()
        requests = reconcile_orphaned_slurm_runs(
            context.instance, resource, stale_after_seconds=stale_after_seconds
        )
        keep = [r for r in requests if r.job_name in (None, job)]
        others = [r for r in requests if r.job_name not in (None, job)]
        cancel = [r.tags.get("dagster_slurm/job_id", "") for r in others]
        cancel = [j for j in cancel if j.isdigit()]
        if cancel:
            with SSHConnectionPool(resource.ssh) as pool:
                pool.run(f"scancel {' '.join(cancel)} 2>&1 || true")
            context.log.warning(f"cancelled orphaned SLURM jobs {cancel}")
        ended = finished_allocation_runs(slurm, context.instance)
        if ended:
            released = release_run(slurm, ended, grace=0)
            context.log.info(f"released the allocations of ended runs {ended}: {released}")
        return keep or dg.SkipReason("no orphaned SLURM runs")

    return _sensor


def retriever_partitions_sensor(defaults: Sequence[str]) -> dg.SensorDefinition:
    """Adds the default retrievers as partitions of ``retriever_runs`` (running by default),
    so the UI lists them (missing until evaluated) from the first tick."""

    @dg.sensor(
        name="saber_retriever_partitions_sensor",
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Add the default retrievers as partitions of retriever_runs.",
    )
    def _sensor(context: dg.SensorEvaluationContext):
        known = set(context.instance.get_dynamic_partitions("retrievers"))
        new = [s for s in defaults if s not in known]
        if not new:
            return dg.SkipReason("every default retriever is a partition")
        return dg.SensorResult(
            dynamic_partitions_requests=[dg.AddDynamicPartitionsRequest("retrievers", new)]
        )

    return _sensor


def retriever_eval_sensor(job: str) -> dg.SensorDefinition:
    """Requests ``job`` for every retriever partition not evaluated since the export's last
    materialization (stopped by default: turn it on to keep the leaderboard current)."""

    @dg.sensor(
        name="saber_retriever_eval_sensor",
        job_name=job,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Evaluate each retriever partition missing for the latest export.",
    )
    def _sensor(context: dg.SensorEvaluationContext):
        instance = context.instance
        export = instance.get_latest_materialization_event(dg.AssetKey("benchmark_export"))
        if export is None:
            return dg.SkipReason("no export yet")
        requests = []
        for spec in instance.get_dynamic_partitions("retrievers"):
            done = instance.get_latest_materialization_event(
                dg.AssetKey("retriever_runs"), partition=spec
            )
            if done is None or done.storage_id < export.storage_id:
                requests.append(
                    dg.RunRequest(run_key=f"{spec}@{export.storage_id}", partition_key=spec)
                )
        return requests or dg.SkipReason("every retriever is evaluated on the latest export")

    return _sensor


def build_sensors(build: Any, slurm: Any | None = None, eval_job: str = "") -> list:
    """The input-change sensor, the retriever-partition sensors (with ``eval_job``), plus the
    orphan sensor when ``slurm`` (a SlurmDispatch) is given."""
    sensors: list = [input_change_sensor(build)]
    if eval_job:
        from saber_assets.evaluation import DEFAULT_RETRIEVERS

        sensors += [
            retriever_partitions_sensor(DEFAULT_RETRIEVERS),
            retriever_eval_sensor(eval_job),
        ]
    if slurm is not None:
        interval = build.slurm.orphan_poll_seconds
        sensors.append(slurm_orphan_sensor(slurm, BUILD_JOB, interval_seconds=interval))
    return sensors
