"""What a build's SLURM work cost, recorded in the build database.

* ``slurm_stage_costs`` — one row per dispatch call of an LLM stage (written by the dispatcher):
  requests, shards (reused), requests/s and tokens/s over the shards answered for it, time spent
  waiting for a server (queue and model load), wall time, relays, job ids.
* ``slurm_run_costs`` — one row per SLURM job of a run, written when the run ends
  (:func:`finish_run`): state, exit reason, queue wait, elapsed, GPUs, GPU-hours, model loads,
  load time, shards, requests and tokens (``sacct`` plus the LLM servers' status files).

``saber build`` prints :func:`cost_lines` at the end; the ``build_report`` asset shows
:func:`report_items`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import polars as pl

from saber_slurm.allocation import release_run, run_costs
from saber_slurm.dispatcher import COST_TABLE
from saber_slurm.settings import SlurmDispatch
from saber_store.database import MANIFEST, DuckDBStore

RUN_TABLE = "slurm_run_costs"
RUN_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {RUN_TABLE} (
    run_id VARCHAR, job_id VARCHAR, kind VARCHAR, model_key VARCHAR, state VARCHAR,
    exit_reason VARCHAR, queue_wait_s DOUBLE, elapsed_s DOUBLE, gpus BIGINT, gpu_hours DOUBLE,
    model_loads BIGINT, load_s DOUBLE, shards BIGINT, requests BIGINT, tokens BIGINT,
    recorded_at TIMESTAMPTZ
)"""
RUN_COLUMNS = (
    "job_id", "kind", "model_key", "state", "exit_reason", "queue_wait_s", "elapsed_s", "gpus",
    "gpu_hours", "model_loads", "load_s", "shards", "requests", "tokens",
)  # fmt: skip


def stage_costs(store: DuckDBStore, run_ids: Sequence[str]) -> pl.DataFrame:
    """Per LLM stage of the given runs: requests, shards, reused shards, requests/s and tokens/s
    (over the shards answered for the stage), waiting, wall time, relays and job ids."""
    if not run_ids or not store.has_table(COST_TABLE):
        return pl.DataFrame()
    marks = ", ".join("?" * len(run_ids))
    rows = store.query(f"SELECT * FROM {COST_TABLE} WHERE run_id IN ({marks})", list(run_ids))
    if rows.is_empty():
        return rows
    tokens = pl.col("prompt_tokens") + pl.col("completion_tokens")
    out = (
        rows.with_columns(tokens.alias("tokens"))
        .group_by("run_id", "stage", "mode", maintain_order=True)
        .agg(
            pl.col("n_requests").sum(),
            pl.col("n_answered").sum(),
            pl.col("n_shards").sum(),
            pl.col("n_reused_shards").sum(),
            pl.col("generate_s").sum(),
            pl.col("tokens").sum(),
            pl.col("waiting_s").sum(),
            pl.col("wall_s").sum(),
            pl.col("relays").sum(),
            pl.col("job_ids"),
        )
        .with_columns(pl.col("job_ids").map_elements(_union_jobs, return_dtype=pl.String))
    )
    fresh = pl.col("n_answered")  # requests answered for the stage (not reused)
    return out.with_columns(
        pl.when(pl.col("generate_s") > 0)
        .then(fresh / pl.col("generate_s"))
        .otherwise(0.0)
        .round(3)
        .alias("requests_per_s"),
        pl.when(pl.col("generate_s") > 0)
        .then(pl.col("tokens") / pl.col("generate_s"))
        .otherwise(0.0)
        .round(1)
        .alias("tokens_per_s"),
    )


def _union_jobs(lists: pl.Series) -> str:
    """One JSON list of job ids from a group's JSON lists (first-seen order)."""
    seen: dict[str, None] = {}
    for text in lists:
        seen.update(dict.fromkeys(json.loads(text or "[]")))
    return json.dumps(list(seen))


def finish_run(settings: SlurmDispatch, store: DuckDBStore, run_id: str) -> dict[str, Any]:
    """At the end of a run: release its allocations, read what its jobs cost and record it in
    ``slurm_run_costs``; returns :func:`~saber_slurm.allocation.run_costs`'s dict.
    A run that sent nothing to SLURM (every stage reused) touches the cluster not at all."""
    stages = stage_costs(store, [run_id])
    if stages.is_empty():
        return {"jobs": [], "allocations": 0, "models": 0, "slurm_jobs": 0, "model_loads": 0,
                "gpu_hours": 0.0, "queue_wait_s": 0.0}  # fmt: skip
    if settings.mode == "allocation":
        release_run(settings, [run_id])
    other = []
    if not stages.is_empty():
        per_shard = stages.filter(pl.col("mode") == "per_shard")["job_ids"].to_list()
        other = [j for text in per_shard for j in json.loads(text)]
    costs = run_costs(settings, [run_id], other)
    now = datetime.now(UTC)
    rows = [[run_id, *[job.get(c) for c in RUN_COLUMNS], now] for job in costs["jobs"]]
    if rows:
        with store.connect() as con:
            con.execute(RUN_SCHEMA)
            con.executemany(
                f"INSERT INTO {RUN_TABLE} VALUES ({', '.join('?' * (len(RUN_COLUMNS) + 2))})",
                rows,
            )
    return costs


def summarize_jobs(jobs: pl.DataFrame) -> dict[str, Any]:
    """Allocations, SLURM jobs, model loads, GPU-hours and queue wait of ``slurm_run_costs``
    rows (or :func:`run_costs` job dicts as a frame)."""
    if jobs.is_empty():
        return {"allocations": 0, "slurm_jobs": 0, "model_loads": 0, "gpu_hours": 0.0}
    return {
        "allocations": int((jobs["kind"] == "llm-server").sum()),
        "slurm_jobs": jobs.height,
        "model_loads": int(jobs["model_loads"].fill_null(0).sum()),
        "gpu_hours": round(float(jobs["gpu_hours"].fill_null(0).sum()), 4),
        "queue_wait_s": round(float(jobs["queue_wait_s"].fill_null(0).sum()), 1),
        "load_s": round(float(jobs["load_s"].fill_null(0).sum()), 1),
        "relays": _relays(jobs),
    }


def _relays(jobs: pl.DataFrame) -> int:
    """Successor server jobs: servers beyond the first of each (run, model) allocation."""
    servers = jobs.filter(pl.col("kind") == "llm-server")
    keys = ["run_id", "model_key"] if "run_id" in servers.columns else ["model_key"]
    return servers.height - servers.select(keys).unique().height


def run_jobs(store: DuckDBStore, run_ids: Sequence[str]) -> pl.DataFrame:
    """The recorded ``slurm_run_costs`` rows of the given runs (latest record per job)."""
    if not run_ids or not store.has_table(RUN_TABLE):
        return pl.DataFrame()
    marks = ", ".join("?" * len(run_ids))
    rows = store.query(f"SELECT * FROM {RUN_TABLE} WHERE run_id IN ({marks})", list(run_ids))
    return rows.sort("recorded_at").unique(["run_id", "job_id"], keep="last", maintain_order=True)


def cost_lines(costs: dict[str, Any], stages: pl.DataFrame) -> list[str]:
    """Human lines for the end of ``saber build``: totals, then one line per stage."""
    lines = [
        f"slurm:      {costs['allocations']} allocation(s) for {costs['models']} model(s), "
        f"{costs['slurm_jobs']} SLURM job(s), {costs['model_loads']} model load(s), "
        f"{costs['gpu_hours']:.4f} GPU-hours, queue wait {costs['queue_wait_s']:.0f}s"
    ]
    for row in stages.iter_rows(named=True) if not stages.is_empty() else []:
        lines.append(
            f"  {row['stage']:<22} {row['n_requests']:>6} requests, {row['n_shards']} shard(s) "
            f"({row['n_reused_shards']} reused), {row['requests_per_s']} req/s, "
            f"{row['tokens_per_s']} tok/s, waited {row['waiting_s']:.0f}s"
        )
    return lines


def producing_runs(store: DuckDBStore) -> list[str]:
    """The runs that made the current tables of the LLM stages that went through SLURM."""
    if not store.has_table(COST_TABLE) or not store.has_table(MANIFEST):
        return []
    rows = store.query(
        f"SELECT DISTINCT m.run_id FROM {MANIFEST} m "
        f"JOIN (SELECT DISTINCT stage FROM {COST_TABLE}) c ON m.asset_key = c.stage"
    )
    return sorted(r for r in rows["run_id"].to_list() if r) if not rows.is_empty() else []


def build_costs(
    settings: SlurmDispatch, store: DuckDBStore, run_ids: Sequence[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(jobs, stages) of the given runs: jobs as recorded when a run ended, read live from the
    cluster for a run still going (the one building the report; its allocation is still
    held), per-stage rows from ``slurm_stage_costs``."""
    recorded = run_jobs(store, run_ids)
    stages = stage_costs(store, run_ids)
    done = set(recorded["run_id"].to_list()) if not recorded.is_empty() else set()
    live = [r for r in run_ids if r not in done]
    frames = [recorded.drop("recorded_at")] if not recorded.is_empty() else []
    if live:
        per_shard = (
            stages.filter(pl.col("run_id").is_in(live) & (pl.col("mode") == "per_shard"))
            if not stages.is_empty()
            else stages
        )
        other = [
            j
            for t in (per_shard["job_ids"] if not per_shard.is_empty() else [])
            for j in json.loads(t)
        ]
        jobs = run_costs(settings, live, other)["jobs"]
        if jobs:
            frames.append(pl.DataFrame(jobs))
    jobs = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    return jobs, stages


def report_items(
    settings: SlurmDispatch, store: DuckDBStore, run_ids: Sequence[str]
) -> tuple[list[tuple[str, str, str]], dict[str, Any]]:
    """The build report's SLURM section — (section, item, value) rows — and its figures: per
    build totals (allocations, SLURM jobs, model loads, GPU-hours, queue wait) over the runs
    that made the current LLM tables, and requests/s and tokens/s per stage."""
    jobs, stages = build_costs(settings, store, run_ids)
    if jobs.is_empty() and stages.is_empty():
        return [], {}
    totals = summarize_jobs(jobs)
    figures = {f"slurm_{k}": v for k, v in totals.items()}
    items = [("slurm", k.replace("_", " "), str(v)) for k, v in totals.items()]
    if not jobs.is_empty() and (jobs["state"] == "RUNNING").any():
        items.append(("slurm", "note", "an allocation still running is counted so far"))
    for row in stages.iter_rows(named=True) if not stages.is_empty() else []:
        items.append(
            (
                "slurm",
                f"stage {row['stage']}",
                f"{row['n_requests']} requests, {row['n_shards']} shards "
                f"({row['n_reused_shards']} reused), {row['requests_per_s']} req/s, "
                f"{row['tokens_per_s']} tok/s, waited {row['waiting_s']:.0f}s",
            )
        )
    return items, figures
