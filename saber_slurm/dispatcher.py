"""SLURM execution of LLM calls: request shards; the per-shard mode (one dagster-slurm job per
shard, retries) and what both modes share (:class:`ShardDispatch`: shard keys, transfers,
provenance stamps, metadata and the stage's cost record).

``SlurmDispatch`` is the resource (cluster, queue, shard and retry settings);
:func:`saber_slurm.dispatch.open_dispatch` returns the callable that ``CachedLLM``
calls for its cache misses — :class:`SlurmDispatcher` here for ``mode: per_shard``, the run's
allocation (:mod:`saber_slurm.allocation`) by default. A per-shard call cuts the requests
(in
CachedLLM's order: a round's judge requests come query by query, so query-first prompts sharing
a prefix sit together for vLLM's prefix cache; ``sort_by_prompt`` groups them across the whole
call) into shards of ``shard_size``, writes each
shard as ``requests.parquet`` into its own folder on the cluster
(``<remote_base>/shards/<content hash>``) and submits one job per shard with dagster-slurm's
``ComputeResource.run`` (mode ``slurm``, pre-deployed payload environment, ``BashLauncher``).
The payload (``saber_compute/llm_shard.py``) rebuilds the backend from its spec, answers
the shard, writes ``results.parquet`` and reports progress and throughput through dagster-pipes.

* A shard whose results already exist (same requests, same backend) is never submitted again.
* A failed, timed-out, preempted or cancelled job is resubmitted for that shard only, at most
  ``max_retries`` times; then the call raises ``SlurmShardError`` with every job id, its final
  SLURM state and the tail of the last job's log.
* Every result carries provenance in ``LLMResult.extra`` (``slurm_job_id``, ``slurm_node``,
  ``gpu``, ``cuda_visible_devices``, ``shard``, ``shard_elapsed_s``); the asset's metadata gets
  the job ids and a per-shard table with requests/s and tokens/s.

Jobs run one at a time per asset step (dagster-slurm's client blocks and installs signal
handlers, so it must run on the step's main thread); size shards so that one job keeps its GPUs
busy (thousands of requests on vLLM).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq
from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

from saber_compute import llm_shard
from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_compute.llm_shard import (
    REQUESTS,
    RESULTS,
    STATS,
    requests_to_table,
    table_to_results,
)
from saber_llm.base import LLMBackend, backend_spec
from saber_slurm.adapter import step_run_dir
from saber_slurm.settings import SlurmDispatch, for_engine
from saber_slurm.transfer import get_file, put_file
from saber_store.database import DuckDBStore

PAYLOAD = Path(llm_shard.__file__).resolve()
LOG_TAIL_LINES = 30
CANCELLED_RUN = (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)
COST_TABLE = "slurm_stage_costs"
COST_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {COST_TABLE} (
    run_id VARCHAR, stage VARCHAR, mode VARCHAR, model_key VARCHAR, allocation VARCHAR,
    job_ids VARCHAR, n_requests BIGINT, n_answered BIGINT, n_shards BIGINT, n_reused_shards BIGINT,
    generate_s DOUBLE, prompt_tokens BIGINT, completion_tokens BIGINT, requests_per_s DOUBLE,
    tokens_per_s DOUBLE, waiting_s DOUBLE, wall_s DOUBLE, relays BIGINT, created_at TIMESTAMPTZ
)"""


class SlurmShardError(RuntimeError):
    """A shard whose jobs all failed (message: job ids, states, log tail)."""


@dataclass
class Attempt:
    """One submission of a shard: job id, final state, exit code, error and log tail."""

    job_id: str
    state: str
    exit_code: str = ""
    error: str | None = None
    log_tail: str = ""


@dataclass
class ShardRecord:
    """What happened to one shard: its attempts, whether results were reused, its stats."""

    key: str
    n_requests: int
    attempts: list[Attempt] = field(default_factory=list)
    reused: bool = False
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def job_ids(self) -> list[str]:
        """Every job submitted for this shard (failed ones included)."""
        return [a.job_id for a in self.attempts if a.job_id]


def _shard_key(spec: str, config: dict, identity: dict, rows: list[dict]) -> str:
    payload = json.dumps([spec, config, identity, rows], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _prompt_text(request: LLMRequest) -> str:
    return "\n".join(m.content for m in request.messages)


def plan_shards(requests: Sequence[LLMRequest], size: int, sort: bool = False) -> list[list[int]]:
    """Request indices per shard: sorted by prompt text (stable) when ``sort``, cut by ``size``."""
    order = list(range(len(requests)))
    if sort:
        order.sort(key=lambda i: _prompt_text(requests[i]))
    size = max(size, 1)
    return [order[start : start + size] for start in range(0, len(order), size)]


class ShardDispatch:
    """What both SLURM modes share: the backend spec sent to the cluster, shard records,
    transfers, provenance stamps, the asset metadata and the stage's row in
    ``slurm_stage_costs``."""

    mode = "per_shard"

    def __init__(
        self,
        settings: SlurmDispatch,
        context: dg.AssetExecutionContext,
        backend: LLMBackend,
        store: DuckDBStore | None = None,
    ) -> None:
        self.context = context
        self.store = store
        self.identity = backend.identity()
        spec, config = backend_spec(backend)
        self.spec = settings.backend_spec or spec
        self.settings = engine = for_engine(settings, self.spec)
        given = engine.backend_config_json
        self.config = json.loads(given) if given else config
        self.ssh = engine.ssh_resource()
        self.records: list[ShardRecord] = []
        self.waiting_s = 0.0
        self.relays = 0
        self.started = time.monotonic()
        self._call = (0, 0.0, 0)  # records, waiting_s and relays before the current call
        self._start_mode(settings)

    def _start_mode(self, profile: SlurmDispatch) -> None:
        """The state of this dispatch mode beside the shared one (none here); ``profile``: the
        settings as given, before :func:`for_engine`."""

    def begin_call(self) -> None:
        """Mark the start of a dispatch call (its cost row counts only what follows)."""
        self._call = (len(self.records), self.waiting_s, self.relays)

    @property
    def chunk_size(self) -> int:
        """Requests per call that ``CachedLLM`` should send (one shard: cached per job)."""
        return max(self.settings.shard_size, 1)

    def shard_key(self, table: Any) -> str:
        """The content address of a shard (requests and backend)."""
        return _shard_key(self.spec, self.config, self.identity, table.to_pylist())

    def _stamp(self, results: list[LLMResult], record: ShardRecord) -> list[LLMResult]:
        extra = {"slurm_shard_reused": record.reused, "slurm_attempts": len(record.attempts)}
        return [replace(r, extra={**r.extra, **extra}) for r in results]

    def _check_identity(self, record: ShardRecord) -> None:
        remote = record.stats.get("identity")
        if remote is not None and remote != self.identity:
            raise SlurmShardError(
                f"shard {record.key}: the payload's backend identity {remote} differs from the "
                f"local one {self.identity}; the cluster environment runs different code"
            )

    # -- transfer ----------------------------------------------------------------------------
    def _put(self, pool: SSHConnectionPool, local: Path, remote: str) -> None:
        put_file(self.settings, pool, local, remote)

    def _get(self, pool: SSHConnectionPool, remote: str, local: Path) -> None:
        get_file(self.settings, pool, remote, local)

    # -- reporting ---------------------------------------------------------------------------
    def _shard_line(self, record: ShardRecord) -> str:
        s = record.stats
        return (
            f"SLURM shard {record.key}: {record.n_requests} requests, jobs {record.job_ids}, "
            f"node {s.get('slurm_node')}, gpu {s.get('gpu')}, {s.get('elapsed_s')}s, "
            f"{s.get('requests_per_s')} req/s, {s.get('tokens_per_s')} tok/s"
        )

    def _fresh(self, records: list[ShardRecord] | None = None) -> list[ShardRecord]:
        return [r for r in (self.records if records is None else records) if not r.reused]

    def throughput(self, records: list[ShardRecord] | None = None) -> dict[str, float]:
        """Requests/s and tokens/s over the shards answered for this stage (not reused), or
        over ``records``."""
        fresh = self._fresh(records)
        gen = sum(r.stats.get("generate_s", 0.0) for r in fresh)
        n = sum(r.stats.get("n_requests", 0) for r in fresh)
        tokens = sum(
            r.stats.get("prompt_tokens", 0) + r.stats.get("completion_tokens", 0) for r in fresh
        )
        return {
            "generate_s": round(gen, 3),
            "requests_per_s": round(n / gen, 3) if gen else 0.0,
            "tokens_per_s": round(tokens / gen, 1) if gen else 0.0,
        }

    def job_ids(self) -> list[str]:
        """Every SLURM job that worked for this stage (failed attempts included), in order."""
        return list(dict.fromkeys(j for r in self.records for j in r.job_ids))

    def metadata(self) -> dict[str, Any]:
        """Job ids, counts, overall throughput and a per-shard table (asset metadata)."""
        jobs = self.job_ids()
        speed = self.throughput()
        rows = [
            "| shard | requests | jobs:state | reused | node | gpu | elapsed s | req/s | tok/s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in self.records:
            s = r.stats
            attempts = ", ".join(f"{a.job_id or '-'}:{a.state}" for a in r.attempts)
            origin = s.get("slurm_job_id", "") if r.reused else ""
            rows.append(
                f"| {r.key[:12]} | {r.n_requests} | {attempts or origin} | {r.reused} | "
                f"{s.get('slurm_node', '')} | {s.get('gpu', '')} | {s.get('elapsed_s', '')} | "
                f"{s.get('requests_per_s', '')} | {s.get('tokens_per_s', '')} |"
            )
        return {
            "slurm_mode": self.mode,
            "slurm_job_ids": dg.MetadataValue.json(jobs),
            "slurm_n_jobs": len(jobs),
            "slurm_n_shards": len(self.records),
            "slurm_n_reused_shards": sum(r.reused for r in self.records),
            "slurm_n_failed_attempts": sum(
                a.state != "COMPLETED" for r in self.records for a in r.attempts
            ),
            "slurm_requests_per_s": speed["requests_per_s"],
            "slurm_tokens_per_s": speed["tokens_per_s"],
            "slurm_waiting_s": round(self.waiting_s, 1),
            "slurm_wall_s": round(time.monotonic() - self.started, 1),
            "slurm_shards": dg.MetadataValue.md("\n".join(rows)),
            **self.extra_metadata(),
        }

    def extra_metadata(self) -> dict[str, Any]:
        """Mode-specific metadata (none here)."""
        return {}

    def _emit_metadata(self) -> None:
        try:  # asset metadata: also for assets with checks (several outputs)
            self.context.add_asset_metadata(self.metadata())
        except Exception as exc:  # metadata is a report, never a reason to fail
            self.context.log.warning(f"could not attach SLURM metadata: {exc}")

    def cost_row(self, n_requests: int, wall_s: float) -> dict[str, Any]:
        """This dispatch call's row of ``slurm_stage_costs`` (since :meth:`begin_call`)."""
        first, waited, relays = self._call
        records = self.records[first:]
        fresh = self._fresh(records)
        speed = self.throughput(records)
        jobs = list(dict.fromkeys(j for r in records for j in r.job_ids))
        return {
            "run_id": self.context.run.run_id,
            "stage": self.context.asset_key.to_user_string(),
            "mode": self.mode,
            "model_key": getattr(self, "key", ""),
            "allocation": getattr(self, "alloc", ""),
            "job_ids": json.dumps(jobs),
            "n_requests": n_requests,
            "n_answered": sum(r.n_requests for r in fresh),
            "n_shards": len(records),
            "n_reused_shards": len(records) - len(fresh),
            "generate_s": speed["generate_s"],
            "prompt_tokens": sum(r.stats.get("prompt_tokens", 0) for r in fresh),
            "completion_tokens": sum(r.stats.get("completion_tokens", 0) for r in fresh),
            "requests_per_s": speed["requests_per_s"],
            "tokens_per_s": speed["tokens_per_s"],
            "waiting_s": round(self.waiting_s - waited, 3),
            "wall_s": round(wall_s, 3),
            "relays": self.relays - relays,
            "created_at": datetime.now(UTC),
        }

    def _record_cost(self, n_requests: int, wall_s: float) -> None:
        """Append this call's cost to the build database (when the stage gave a store)."""
        if self.store is None:
            return
        row = self.cost_row(n_requests, wall_s)
        try:
            with self.store.connect() as con:
                con.execute(COST_SCHEMA)
                con.execute(
                    f"INSERT INTO {COST_TABLE} ({', '.join(row)}) "
                    f"VALUES ({', '.join('?' * len(row))})",
                    list(row.values()),
                )
        except Exception as exc:  # a report, never a reason to fail
            self.context.log.warning(f"could not record the SLURM stage cost: {exc}")


class SlurmDispatcher(ShardDispatch):
    """Answers requests with SLURM jobs (one per shard); keeps a record of every shard."""

    def _start_mode(self, profile: SlurmDispatch) -> None:
        """The dagster-slurm compute resource that submits the shard jobs."""
        self.compute = profile.compute_resource()

    # -- the Dispatch callable -------------------------------------------------------------
    def __call__(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """One result per request, in order; raises ``SlurmShardError`` when a shard fails."""
        if not requests:
            return []
        shards = plan_shards(requests, self.settings.shard_size, self.settings.sort_by_prompt)
        out: list[LLMResult | None] = [None] * len(requests)
        staging = Path(tempfile.mkdtemp(prefix="saber-slurm-"))
        started = time.monotonic()
        self.begin_call()
        try:
            with SSHConnectionPool(self.ssh) as pool:
                for idx in shards:
                    results = self._run_shard(pool, [requests[i] for i in idx], staging)
                    for i, result in zip(idx, results, strict=True):
                        out[i] = result
                self._reset_step_dir(pool)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            self._emit_metadata()
            self._record_cost(len(requests), time.monotonic() - started)
        return [r for r in out if r is not None]

    # -- one shard ------------------------------------------------------------------------
    def _run_shard(
        self, pool: SSHConnectionPool, shard: list[LLMRequest], staging: Path
    ) -> list[LLMResult]:
        table = requests_to_table(shard)
        key = self.shard_key(table)
        record = ShardRecord(key=key, n_requests=len(shard))
        self.records.append(record)
        remote = self.settings.shard_dir(key)
        local = staging / key
        local.mkdir(parents=True, exist_ok=True)
        done = self._finished(pool, remote, local, len(shard))
        if done is not None:
            record.reused, record.stats = True, done[1]
            self.context.log.info(f"SLURM shard {key}: results exist ({len(shard)} requests)")
            return self._stamp(done[0], record)
        pq.write_table(table, local / REQUESTS)
        self._put(pool, local / REQUESTS, f"{remote}/{REQUESTS}")
        for attempt_no in range(1 + max(self.settings.max_retries, 0)):
            attempt = self._submit(pool, remote, record)
            done = self._finished(pool, remote, local, len(shard)) if not attempt.error else None
            if done is not None:
                record.stats = done[1]
                self._check_identity(record)
                self.context.log.info(self._shard_line(record))
                return self._stamp(done[0], record)
            if not attempt.error:
                attempt.state, attempt.error = "", "the job finished without writing results"
            self._diagnose(pool, attempt)
            left = self.settings.max_retries - attempt_no
            self.context.log.warning(
                f"SLURM shard {key}: attempt {attempt_no + 1} failed (job {attempt.job_id or '-'} "
                f"{attempt.state}); {left} retries left"
            )
        raise SlurmShardError(self._failure_message(record))

    def _submit(self, pool: SSHConnectionPool, remote: str, record: ShardRecord) -> Attempt:
        """Run one job for the shard and record it (``error`` set when it failed)."""
        known = set(record.job_ids)
        attempt = Attempt(job_id="", state="COMPLETED", exit_code="0:0")
        record.attempts.append(attempt)
        self._reset_step_dir(pool)
        try:
            invocation = self.compute.run(
                context=self.context,
                payload_path=str(PAYLOAD),
                extra_slurm_opts=self.settings.extra_slurm_opts() or None,
                extras={
                    "shard_dir": remote,
                    "backend_spec": self.spec,
                    "backend_config": self.config,
                    "progress_every": self.settings.progress_every,
                    "warmup": self.settings.warmup,
                },
                extra_env=dict(self.settings.payload_env) or None,
                poll_timeout=self.settings.poll_timeout,
                defer_cleanup=True,
            )
        except Exception as exc:  # job or transport failures are retried, cancellation is not
            if self._run_cancelled():
                raise
            attempt.state, attempt.exit_code, attempt.error = "", "", str(exc) or repr(exc)
            attempt.job_id = self._job_id(attempt.error, known)
            return attempt
        attempt.job_id = self._job_id("", known)
        for message in invocation.get_custom_messages():
            if isinstance(message, dict) and "saber_shard_stats" in message:
                attempt.job_id = str(message["saber_shard_stats"].get("slurm_job_id") or "")
        return attempt

    def _finished(
        self, pool: SSHConnectionPool, remote: str, local: Path, n: int
    ) -> tuple[list[LLMResult], dict] | None:
        """(results, stats) when the shard's results exist on the cluster, else None."""
        raw = pool.run(f"cat {shlex.quote(f'{remote}/{STATS}')} 2>/dev/null || true").strip()
        try:
            stats = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            stats = None
        if not stats or stats.get("n_requests") != n:
            return None
        try:
            self._get(pool, f"{remote}/{RESULTS}", local / RESULTS)
            results = table_to_results(pq.read_table(local / RESULTS))
        except (OSError, RuntimeError, ValueError):
            return None
        return (results, stats) if len(results) == n else None

    # -- failures ---------------------------------------------------------------------------
    def _job_id(self, text: str, known: set[str]) -> str:
        """The job of the last attempt: from the error text, else dagster-slurm's run tag."""
        match = re.search(r"[Jj]ob (\d+)", text)
        if match:
            return match.group(1)
        run = self.context.instance.get_run_by_id(self.context.run.run_id)
        tag = (run.tags if run else {}).get("dagster_slurm/job_id", "")
        return tag if tag.isdigit() and tag not in known else ""

    def _run_cancelled(self) -> bool:
        run = self.context.instance.get_run_by_id(self.context.run.run_id)
        return run is not None and run.status in CANCELLED_RUN

    def _diagnose(self, pool: SSHConnectionPool, attempt: Attempt) -> None:
        """Fill in the failed job's final state and exit code (sacct) and its log tail."""
        if attempt.job_id:
            acct = pool.run(
                f"sacct -X -n -P -j {attempt.job_id} -o State,ExitCode 2>/dev/null || true"
            ).strip()
            if acct:
                state, _, exit_code = acct.splitlines()[0].partition("|")
                attempt.state = state.split()[0] if state.strip() else ""
                attempt.exit_code = exit_code
            step = self._step_dir(pool)
            if step:
                paths = [f"{step}/slurm-{attempt.job_id}.{ext}" for ext in ("out", "err")]
                attempt.log_tail = pool.run(
                    " ; ".join(
                        f"echo {shlex.quote('--- ' + p.rsplit('/', 1)[-1])} ; "
                        f"tail -n {LOG_TAIL_LINES} {shlex.quote(p)} 2>/dev/null || true"
                        for p in paths
                    )
                ).strip()
        attempt.state = attempt.state or "UNKNOWN"

    def _failure_message(self, record: ShardRecord) -> str:
        lines = [
            f"SLURM shard {record.key} ({record.n_requests} requests) failed after "
            f"{len(record.attempts)} attempt(s) (max_retries={self.settings.max_retries}):"
        ]
        for i, a in enumerate(record.attempts, 1):
            first = (a.error or "").strip().splitlines()[0] if (a.error or "").strip() else ""
            lines.append(
                f"  attempt {i}: job {a.job_id or '(not submitted)'} state {a.state}"
                f"{f' exit {a.exit_code}' if a.exit_code else ''}: {first}"
            )
        tail = record.attempts[-1].log_tail if record.attempts else ""
        if tail:
            lines += [f"tail of the last job's log (job {record.attempts[-1].job_id}):", tail]
        return "\n".join(lines)

    # -- dagster-slurm's per-step run folder ------------------------------------------------
    def _step_dir(self, pool: SSHConnectionPool) -> str | None:
        """dagster-slurm's run folder of this step (the same for every job of the step)."""
        return step_run_dir(self.compute, self.context, pool)

    def _reset_step_dir(self, pool: SSHConnectionPool) -> None:
        """Remove the step's run folder so the next job's Pipes stream starts empty."""
        step = self._step_dir(pool)
        if step and "/runs/" in step:
            pool.run(f"rm -rf -- {shlex.quote(step)}")
