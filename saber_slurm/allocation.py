"""Allocation mode: one LLM-server job per (run, model) that keeps the model loaded, fed stage
by stage.

A stage (one asset step, in whichever process of the run) cuts its cache misses into shards
exactly as the per-shard mode does, and

1. asks the cluster which shards already have results (``<remote_base>/shards/<key>/``: a shard
   answered once, by any run or mode, is never answered again);
2. uploads the other shards' requests and puts them into the inbox of the run's allocation for
   this model, ``<remote_base>/allocations/<run_id>/<model_key>/`` (layout and server loop:
   ``saber_compute/llm_server.py``);
3. under a lock on the cluster (``flock``) makes sure a server job is queued or running for that
   allocation: the first stage of a run that needs the model submits it (``sbatch`` with the
   profile's partition, account, QoS, GPUs, CPUs, memory, ``time_limit`` and
   ``--signal=B:USR1@signal_lead_seconds``); later stages find it and feed it, so the model is
   loaded once per allocation (the judge and the annotator share one when they are the same
   backend and model);
4. polls every ``status_poll_seconds`` — one command over the process's one multiplexed SSH
   connection — for finished shards, the server job's state and its status file, and yields each
   shard's results as soon as they are there (``CachedLLM`` stores them at once);
5. when the server job is gone with shards pending (walltime drain, preemption, failure, idle
   exit) submits a successor: the walltime relay. A job that ended without answering a shard,
   and not because it was idle or released, counts as a failure; after ``max_retries`` of them
   the stage fails with ``SlurmShardError`` (job ids, states, exit codes, the log's tail). A shard
   whose answer failed (``error.json``) is put back at most ``max_retries`` times.

The allocation is released when the run ends: ``saber build`` releases it when its job finishes
and cancels every job of the run on SIGTERM/SIGINT (:func:`release_run`, :func:`stop_run`); the
orphan sensor releases the allocations of runs that ended or died (runs from the UI); the
server's ``idle_timeout`` is the safety net. :func:`run_costs` reads what a run's SLURM work cost
(allocations, jobs, model loads, GPU-hours, queue wait) from ``sacct`` and the status files.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_compute.llm_server import CLEAN_EXITS, SERVER_JSON
from saber_compute.llm_shard import (
    RESULTS,
    payload_version,
    requests_to_table,
    table_to_results,
)
from saber_slurm.dispatcher import (
    Attempt,
    ShardDispatch,
    ShardRecord,
    SlurmShardError,
    plan_shards,
)
from saber_slurm.settings import SlurmDispatch, payload_lines

SERVER_MODULE = "saber_compute.llm_server"
ACTIVE_STATES = (
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
)
LOCK_WAIT_S = 120
RELEASE_GRACE_S = 5.0
q = shlex.quote


def model_key(spec: str, config: dict[str, Any]) -> str:
    """The allocation key of a backend: a hash of its spec and config (one model, one key)."""
    payload = json.dumps([spec, config], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def allocation_dir(settings: SlurmDispatch, run_id: str, key: str) -> str:
    """The cluster folder of a run's allocation for one model."""
    return f"{settings.remote_base}/allocations/{run_id}/{key}"


def shards_root(settings: SlurmDispatch) -> str:
    """The cluster folder of the content-addressed shard folders."""
    return f"{settings.remote_base}/shards"


def sbatch_script(settings: SlurmDispatch, alloc: str, key: str) -> str:
    """The batch script of an allocation's LLM server job."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=saber-llm-{key[:8]}",
        f"#SBATCH --chdir={alloc}",
        f"#SBATCH --output={alloc}/jobs/slurm-%j.out",
    ]
    if settings.time_limit:
        lines.append(f"#SBATCH --time={settings.time_limit}")
    if settings.signal_lead_seconds > 0:
        lines.append(f"#SBATCH --signal=B:USR1@{settings.signal_lead_seconds}")
    for flag in ("partition", "account", "qos"):
        if getattr(settings, flag):
            lines.append(f"#SBATCH --{flag}={getattr(settings, flag)}")
    if settings.cpus:
        lines.append(f"#SBATCH --cpus-per-task={settings.cpus}")
    if settings.mem:
        lines.append(f"#SBATCH --mem={settings.mem}")
    if settings.gpus_per_node:
        gpus = settings.gpus_per_node
        gres = f"gpu:{settings.gpu_type}:{gpus}" if settings.gpu_type else f"gpu:{gpus}"
        lines.append(f"#SBATCH --gres={gres}")
    lines += [f"#SBATCH {d}" for d in settings.sbatch_directives]
    args = f"--alloc {q(alloc)} --shards {q(shards_root(settings))}"
    lines += payload_lines(settings, SERVER_MODULE, args)
    return "\n".join(lines) + "\n"


def _ensure_script(alloc: str) -> str:
    """Bash (run under the allocation's lock): the last job when queued or running, else a
    newly submitted one. Prints ``job <id> <state>`` or ``submitted <id> <epoch>``."""
    a = q(alloc)
    active = "|".join(ACTIVE_STATES)
    return f"""job=$(tail -n 1 {a}/jobs.txt 2>/dev/null || true)
state=""
if [ -n "$job" ]; then
  if out=$(squeue -h -j "$job" -o %T 2>&1); then state=$out
  elif ! printf '%s' "$out" | grep -q "Invalid job id"; then echo "error squeue: $out"; exit 0
  fi
fi
case "$state" in
  {active}) echo "job $job $state" ;;
  *) rm -f {a}/shutdown
     out=$(cd {a} && sbatch --parsable {a}/server.sbatch 2>&1) ||
       {{ echo "error sbatch: $out" | tr '\n' ' '; echo; exit 0; }}
     job=${{out%%;*}}
     echo "$job" >> {a}/jobs.txt
     echo "submitted $job $(date +%s)" ;;
esac
"""


def _poll_script(alloc: str, shards: str) -> str:
    """The allocation's ``poll.sh <keys>``: ``done <key> <stats>`` / ``error <key> <error>``
    per finished or failed shard, ``job <id> <squeue state>`` and ``status <json>``."""
    a, s = q(alloc), q(shards)
    return f"""cd {s}
for k in "$@"; do
  if [ -s "$k"/stats.json ]; then printf 'done %s ' "$k"; tr -d '\\n' < "$k"/stats.json; echo
  elif [ -s "$k"/error.json ]; then printf 'error %s ' "$k"; tr -d '\\n' < "$k"/error.json; echo
  fi
done
job=$(tail -n 1 {a}/jobs.txt 2>/dev/null || true)
st=""; [ -n "$job" ] && st=$(squeue -h -j "$job" -o %T 2>/dev/null || true)
echo "job $job $st"
if [ -n "$job" ] && [ -s {a}/jobs/"$job".json ]; then
  printf 'status '; tr -d '\\n' < {a}/jobs/"$job".json; echo
fi"""


def _heredoc(path: str, text: str) -> str:
    """Bash writing ``text`` to ``path`` when the file does not exist yet."""
    tag = f"SABER_EOF_{uuid.uuid4().hex}"
    return f"[ -s {q(path)} ] || cat > {q(path)} <<'{tag}'\n{text}\n{tag}\n"


@dataclass
class _Pending:
    """A shard this stage waits for: its request indices, table and record."""

    indices: list[int]
    table: pa.Table
    record: ShardRecord
    errors: int = 0


class AllocationDispatcher(ShardDispatch):
    """Answers requests through the run's LLM-server allocation for this backend."""

    mode = "allocation"

    def _start_mode(self, profile: SlurmDispatch) -> None:
        """The run's allocation of this model: its folder, the shard queue, the jobs seen."""
        self.run_id = self.context.run.run_id
        self.key = model_key(self.spec, self.config)
        self.alloc = allocation_dir(profile, self.run_id, self.key)
        self.shards = shards_root(profile)
        self.server_jobs: list[str] = []
        self.submitted: list[str] = []
        self.failures: list[Attempt] = []
        self.ended: set[str] = set()

    @property
    def chunk_size(self) -> int:
        """``CachedLLM`` streams (``stream``): the whole call at once, results per shard."""
        return 1 << 30

    # -- the Dispatch callables --------------------------------------------------------------
    def __call__(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """One result per request, in order."""
        out: list[LLMResult | None] = [None] * len(requests)
        for indices, results in self.stream(requests):
            for i, result in zip(indices, results, strict=True):
                out[i] = result
        return [r for r in out if r is not None]

    def stream(self, requests: Sequence[LLMRequest]) -> Iterator[tuple[list[int], list[LLMResult]]]:
        """(request indices, results) per shard, as soon as each shard's results exist."""
        if not requests:
            return
        started = time.monotonic()
        self.begin_call()
        staging = Path(tempfile.mkdtemp(prefix="saber-alloc-"))
        try:
            with SSHConnectionPool(self.ssh) as pool:
                yield from self._serve(pool, list(requests), staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            self._emit_metadata()
            self._record_cost(len(requests), time.monotonic() - started)

    # -- one call ----------------------------------------------------------------------------
    def _serve(self, pool: SSHConnectionPool, requests: list[LLMRequest], staging: Path):
        settings = self.settings
        pending: dict[str, _Pending] = {}
        for idx in plan_shards(requests, settings.shard_size, settings.sort_by_prompt):
            table = requests_to_table([requests[i] for i in idx])
            record = ShardRecord(key=self.shard_key(table), n_requests=len(idx))
            self.records.append(record)
            pending[record.key] = _Pending(idx, table, record)
        done, uploaded = self._probe(pool, list(pending))
        for key, stats in done.items():
            shard = pending.pop(key)
            shard.record.reused = True
            yield self._collect(pool, staging, shard, stats)
        if not pending:
            return
        self.context.log.info(
            f"SLURM allocation {self.alloc}: {len(pending)} shard(s) of {len(requests)} "
            f"requests to the LLM server ({len(done)} reused)"
        )
        moves = self._upload(pool, [pending[k] for k in pending if k not in uploaded], staging)
        self._enqueue(pool, list(pending), moves)
        last_progress = last_poll = time.monotonic()
        while pending:
            time.sleep(max(settings.status_poll_seconds, 0.2))
            poll = self._poll(pool, list(pending))
            now = time.monotonic()
            if not poll["serving"]:
                self.waiting_s += now - last_poll
            last_poll = now
            for key, stats in poll["done"].items():
                last_progress = now
                yield self._collect(pool, staging, pending.pop(key), stats)
            for key, error in poll["errors"].items():
                self._shard_failed(pool, pending[key], error)
            if pending and not poll["active"]:
                self._job_ended(pool, poll["job"])
                self._enqueue(pool, list(pending), [])
            if now - last_progress > settings.poll_timeout:
                raise SlurmShardError(
                    f"SLURM allocation {self.alloc}: no shard answered for "
                    f"{settings.poll_timeout}s (poll_timeout); server jobs {self.server_jobs}, "
                    f"{len(pending)} shard(s) pending"
                )

    def _probe(self, pool: SSHConnectionPool, keys: list[str]) -> tuple[dict[str, dict], set[str]]:
        """Shards with results ({key: stats}) and shards whose requests are on the cluster."""
        out = pool.run(
            f"cd {q(self.shards)} 2>/dev/null || exit 0\n"
            f"for k in {' '.join(keys)}; do\n"
            '  if [ -s "$k/stats.json" ]; then printf "done %s " "$k"; '
            "tr -d '\\n' < \"$k/stats.json\"; echo\n"
            '  elif [ -s "$k/requests.parquet" ]; then echo "requests $k"; fi\n'
            "done\n"
        )
        done: dict[str, dict] = {}
        uploaded: set[str] = set()
        for line in out.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "done":
                key, _, stats = rest.partition(" ")
                done[key] = json.loads(stats)
            elif kind == "requests":
                uploaded.add(rest.strip())
        return done, uploaded

    def _upload(
        self, pool: SSHConnectionPool, shards: list[_Pending], staging: Path
    ) -> list[tuple[str, str]]:
        """Copy requests next to their final name; (temporary, final) remote paths to move."""
        moves = []
        for shard in shards:
            key = shard.record.key
            local = staging / f"{key}.parquet"
            pq.write_table(shard.table, local)
            final = f"{self.shards}/{key}/requests.parquet"
            tmp = f"{self.shards}/{key}/.requests.{uuid.uuid4().hex[:8]}.parquet"
            self._put(pool, local, tmp)
            moves.append((tmp, final))
        return moves

    def _enqueue(
        self,
        pool: SSHConnectionPool,
        keys: list[str],
        moves: list[tuple[str, str]],
        again: bool = False,
    ) -> None:
        """Requests in place, shards in the inbox (once; ``again``: even when a job still
        holds them as active), a server queued or running."""
        a, s = q(self.alloc), q(self.shards)
        server = {
            "backend_spec": self.spec,
            "backend_config": self.config,
            "identity": self.identity,
            "progress_every": self.settings.progress_every,
            "idle_timeout": self.settings.idle_timeout,
            "signal_lead_seconds": self.settings.signal_lead_seconds,
            "payload_version": payload_version(),
            "run_id": self.run_id,
            "model_key": self.key,
        }
        script = [f"set -e\nmkdir -p {a}/inbox {a}/active {a}/jobs"]
        script += [f"mv -f {q(tmp)} {q(final)}" for tmp, final in moves]
        script.append(f"exec 9>>{a}/.lock\nflock -w {LOCK_WAIT_S} 9")
        batch = sbatch_script(self.settings, self.alloc, self.key)
        script.append(_heredoc(f"{self.alloc}/{SERVER_JSON}", json.dumps(server, sort_keys=True)))
        script.append(_heredoc(f"{self.alloc}/server.sbatch", batch))
        script.append(_heredoc(f"{self.alloc}/poll.sh", _poll_script(self.alloc, self.shards)))
        held = "" if again else f'{a}/active/*-"$k"'
        script.append(
            f"i=0\nfor k in {' '.join(keys)}; do\n"
            f'  i=$((i+1)); [ -s {s}/"$k"/stats.json ] && continue\n'
            f'  for f in {a}/inbox/*-"$k" {held}; do [ -e "$f" ] && continue 2; done\n'
            f'  rm -f {s}/"$k"/error.json\n'
            f'  : > {a}/inbox/"$(date +%s%N)-$(printf %06d $i)-$k"\n'
            "done"
        )
        script.append(_ensure_script(self.alloc))
        out = pool.run("\n".join(script)).strip()
        self._note_server(out)

    def _note_server(self, out: str) -> None:
        for line in out.splitlines():
            parts = line.split()
            if parts[:1] == ["submitted"]:
                self.submitted.append(parts[1])
                self.context.log.info(
                    f"SLURM allocation {self.alloc}: submitted LLM server job {parts[1]}"
                )
            if parts[:1] in (["submitted"], ["job"]) and parts[1] not in self.server_jobs:
                self.server_jobs.append(parts[1])
            if parts[:1] == ["error"]:
                self.context.log.warning(f"SLURM allocation {self.alloc}: {line}")
            if parts[:2] == ["error", "sbatch:"]:
                self.failures.append(Attempt("", "NOT_SUBMITTED", error=line))
                if len(self.failures) > self.settings.max_retries:
                    raise SlurmShardError(self._allocation_failure())

    def _poll(self, pool: SSHConnectionPool, keys: list[str]) -> dict[str, Any]:
        """Finished and failed shards, the current server job, its state and status (one short
        command: the allocation's ``poll.sh``, written by ``_enqueue``)."""
        out = pool.run(f"bash {q(self.alloc)}/poll.sh {' '.join(keys)}")
        poll: dict[str, Any] = {"done": {}, "errors": {}, "job": "", "state": "", "status": {}}
        for line in out.splitlines():
            kind, _, rest = line.partition(" ")
            if kind in ("done", "error"):
                key, _, body = rest.partition(" ")
                poll["done" if kind == "done" else "errors"][key] = json.loads(body or "{}")
            elif kind == "job":
                job, _, state = rest.partition(" ")
                poll["job"], poll["state"] = job.strip(), state.strip()
            elif kind == "status":
                poll["status"] = json.loads(rest or "{}")
        poll["active"] = poll["state"] in ACTIVE_STATES
        poll["serving"] = poll["state"] == "RUNNING" and poll["status"].get("state") == "serving"
        if poll["active"] and poll["job"] and poll["job"] not in self.server_jobs:
            self.server_jobs.append(poll["job"])
        return poll

    # -- results and failures ----------------------------------------------------------------
    def _collect(
        self, pool: SSHConnectionPool, staging: Path, shard: _Pending, stats: dict
    ) -> tuple[list[int], list[LLMResult]]:
        record = shard.record
        record.stats = stats
        self._check_identity(record)
        local = staging / f"{record.key}.results.parquet"
        self._get(pool, f"{self.shards}/{record.key}/{RESULTS}", local)
        results = table_to_results(pq.read_table(local))
        if len(results) != record.n_requests or stats.get("n_requests") != record.n_requests:
            raise SlurmShardError(
                f"shard {record.key}: {len(results)} results for {record.n_requests} requests"
            )
        job = str(stats.get("slurm_job_id") or "")
        if not record.reused:
            record.attempts.append(Attempt(job_id=job, state="COMPLETED", exit_code="0:0"))
        self.context.log.info(self._shard_line(record) + (" (reused)" if record.reused else ""))
        return shard.indices, self._stamp(results, record)

    def _shard_failed(self, pool: SSHConnectionPool, shard: _Pending, error: dict) -> None:
        """A shard whose answer failed: put it back, or fail after ``max_retries``."""
        record = shard.record
        record.attempts.append(
            Attempt(job_id=str(error.get("job", "")), state="ERROR", error=error.get("error"))
        )
        shard.errors += 1
        left = self.settings.max_retries - shard.errors
        self.context.log.warning(
            f"SLURM shard {record.key} failed in job {error.get('job')}: {error.get('error')}; "
            f"{max(left, 0)} retries left"
        )
        if left < 0:
            record.attempts[-1].log_tail = str(error.get("traceback", ""))[-3000:]
            raise SlurmShardError(self._failure_message(record))
        pool.run(f"rm -f {q(f'{self.shards}/{record.key}/error.json')}")
        self._enqueue(pool, [record.key], [], again=True)

    def _job_ended(self, pool: SSHConnectionPool, job: str) -> None:
        """The server job left the queue with shards pending: a relay, or a failure."""
        if not job or job in self.ended:
            return
        out = pool.run(
            f"sacct -X -n -P -j {q(job)} -o State,ExitCode 2>/dev/null | head -n 1; echo '---'\n"
            f"tr -d '\\n' < {q(f'{self.alloc}/jobs/{job}.json')} 2>/dev/null; echo; echo '---'\n"
            f"tail -n 30 {q(f'{self.alloc}/jobs/slurm-{job}.out')} 2>/dev/null || true"
        )
        acct, status_text, tail = ([*out.split("---\n"), "", ""])[:3]
        state, _, exit_code = acct.strip().partition("|")
        state = state.split()[0] if state.strip() else ""
        if state in ACTIVE_STATES:
            return  # squeue hiccup: the job still runs
        self.ended.add(job)
        status = json.loads(status_text.strip() or "{}")
        reason = status.get("exit_reason") or ""
        attempt = Attempt(job, state or "UNKNOWN", exit_code.strip(), reason or None, tail.strip())
        if "payload environment runs different code" in tail:  # retrying cannot help
            self.failures.append(attempt)
            raise SlurmShardError(self._allocation_failure())
        if reason in CLEAN_EXITS and (reason != "drained" or status.get("shards", 0) > 0):
            self.relays += 1
            self.context.log.info(
                f"SLURM allocation {self.alloc}: server job {job} ended ({state}, {reason}, "
                f"{status.get('shards', 0)} shard(s) answered); relay to a successor"
            )
            return
        if status.get("shards", 0) > 0:
            self.relays += 1
            self.context.log.warning(
                f"SLURM allocation {self.alloc}: server job {job} ended {state} ({reason or '-'}) "
                f"after {status.get('shards')} shard(s); relay to a successor"
            )
            return
        self.failures.append(attempt)
        left = self.settings.max_retries - len(self.failures) + 1
        self.context.log.warning(
            f"SLURM allocation {self.alloc}: server job {job} ended {state} "
            f"({reason or 'no exit reason'}) without answering a shard; {max(left, 0)} "
            "retries left"
        )
        if left <= 0:
            raise SlurmShardError(self._allocation_failure())

    def _allocation_failure(self) -> str:
        lines = [
            f"SLURM allocation {self.alloc} failed: {len(self.failures)} server job(s) ended "
            f"without answering a shard (max_retries={self.settings.max_retries}):"
        ]
        for i, a in enumerate(self.failures, 1):
            lines.append(
                f"  attempt {i}: job {a.job_id} state {a.state} exit {a.exit_code or '-'}: "
                f"{a.error or 'no exit reason'}"
            )
        last = self.failures[-1] if self.failures else None
        if last and last.log_tail:
            lines += [f"tail of the last job's log (job {last.job_id}):", last.log_tail]
        return "\n".join(lines)

    def _failure_message(self, record: ShardRecord) -> str:
        lines = [
            f"SLURM shard {record.key} ({record.n_requests} requests) failed "
            f"{sum(a.state == 'ERROR' for a in record.attempts)} time(s) in allocation "
            f"{self.alloc} (max_retries={self.settings.max_retries}):"
        ]
        for i, a in enumerate(record.attempts, 1):
            lines.append(f"  attempt {i}: job {a.job_id} state {a.state}: {a.error}")
        if record.attempts and record.attempts[-1].log_tail:
            lines += ["traceback of the last attempt:", record.attempts[-1].log_tail]
        return "\n".join(lines)

    # -- reporting ---------------------------------------------------------------------------
    def job_ids(self) -> list[str]:
        """Server jobs that worked for (or failed) this stage, in order."""
        answered = [j for r in self.records for j in r.job_ids]
        failed = [a.job_id for a in self.failures]
        return list(dict.fromkeys([*self.server_jobs, *answered, *failed]))

    def extra_metadata(self) -> dict[str, Any]:
        """The allocation, its server jobs, the relays and failures this stage saw."""
        return {
            "slurm_allocation": self.alloc,
            "slurm_model_key": self.key,
            "slurm_jobs_submitted": dg.MetadataValue.json(self.submitted),
            "slurm_relays": self.relays,
            "slurm_server_failures": len(self.failures),
        }


# -- run-level operations (``saber build``, the orphan sensor) --------------------------------
def _run_allocs(settings: SlurmDispatch, run_ids: Sequence[str]) -> str:
    return " ".join(q(f"{settings.remote_base}/allocations/{r}") + "/*/" for r in run_ids)


def release_run(
    settings: SlurmDispatch, run_ids: Sequence[str], grace: float = RELEASE_GRACE_S
) -> list[str]:
    """End the allocations of finished runs: ``shutdown`` files (the servers exit on their
    own, COMPLETED), then ``scancel`` whatever is still queued or running after ``grace``
    seconds. Returns the cancelled job ids."""
    if not run_ids:
        return []
    active = "|".join(ACTIVE_STATES)
    allocs = _run_allocs(settings, run_ids)
    script = f"""for A in {allocs}; do [ -d "$A" ] && : > "$A/shutdown"; done
end=$((SECONDS + {max(int(grace), 0)}))
while :; do
  live=""; queued=""
  for A in {_run_allocs(settings, run_ids)}; do
    [ -f "$A/jobs.txt" ] || continue
    j=$(tail -n 1 "$A/jobs.txt")
    case "$(squeue -h -j "$j" -o %T 2>/dev/null)" in
      PENDING) queued="$queued $j" ;;
      {active}) live="$live $j" ;;
    esac
  done
  [ -n "$queued" ] && scancel $queued && echo "cancelled$queued"
  [ -z "$live" ] && break
  if [ $SECONDS -ge $end ]; then scancel $live; echo "cancelled$live"; break; fi
  sleep 0.5
done
"""
    with SSHConnectionPool(settings.ssh_resource()) as pool:
        out = pool.run(script)
    return [j for line in out.splitlines() for j in line.split()[1:]]


def stop_run(settings: SlurmDispatch, run_ids: Sequence[str], wait: float = 4.0) -> list[str]:
    """Stop everything runs left on the cluster, now: ``shutdown`` files and ``scancel`` of
    every job of the user whose working directory belongs to one of the runs (allocation
    servers and per-shard jobs alike), then wait up to ``wait`` seconds until they have left
    the queue (``COMPLETING`` included). Returns the cancelled job ids."""
    if not run_ids:
        return []
    pick = (
        'index($2, base) == 1 { n = split(runs, r, " "); '
        'for (i = 1; i <= n; i++) if (index($2, "/" r[i])) { print $1; break } }'
    )
    allocs = _run_allocs(settings, run_ids)
    script = f"""for A in {allocs}; do [ -d "$A" ] && : > "$A/shutdown"; done
ids=$(squeue --me -h -o '%i|%Z' 2>/dev/null | awk -F'|' -v base={q(settings.remote_base + "/")} \\
  -v runs={q(" ".join(run_ids))} {q(pick)} | tr '\\n' ' ')
[ -n "$ids" ] && scancel $ids
list=$(echo $ids | tr ' ' ',')
end=$((SECONDS + {max(int(wait), 0)}))
while [ -n "$list" ] && [ $SECONDS -lt $end ] && [ -n "$(squeue -h -j "$list" 2>/dev/null)" ]; do
  sleep 0.2
done
echo "cancelled $ids"
"""
    with SSHConnectionPool(settings.ssh_resource()) as pool:
        out = pool.run(script)
    return out.split()[1:]


def allocation_jobs(settings: SlurmDispatch, pool: SSHConnectionPool) -> dict[str, list[str]]:
    """{run id: job ids} of the user's queued or running LLM-server jobs under ``remote_base``
    (their working directory is ``<remote_base>/allocations/<run_id>/<model_key>``)."""
    prefix = f"{settings.remote_base}/allocations/"
    jobs: dict[str, list[str]] = {}
    for line in pool.run("squeue --me -h -o '%i|%Z' 2>/dev/null || true").splitlines():
        job, _, work = line.strip().partition("|")
        if work.startswith(prefix):
            jobs.setdefault(work[len(prefix) :].split("/")[0], []).append(job)
    return jobs


def finished_allocation_runs(settings: SlurmDispatch, instance: dg.DagsterInstance) -> list[str]:
    """Runs this Dagster instance knows as finished (success, failure, canceled) that still hold
    an LLM-server allocation. Runs it does not know (another instance's) are left alone."""
    with SSHConnectionPool(settings.ssh_resource()) as pool:
        jobs = allocation_jobs(settings, pool)
    ended = []
    for run_id in sorted(jobs):
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            ended.append(run_id)
    return ended


def _seconds_between(start: str, end: str) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None


def _tokens(status: dict) -> int:
    return (status.get("prompt_tokens") or 0) + (status.get("completion_tokens") or 0)


def _gpus(tres: str) -> int:
    match = re.search(r"gres/gpu=(\d+)", tres)
    return int(match.group(1)) if match else 0


def run_costs(
    settings: SlurmDispatch, run_ids: Sequence[str], other_jobs: Sequence[str] = ()
) -> dict[str, Any]:
    """What runs cost on the cluster: one row per SLURM job (allocation server jobs from the
    allocation folders, plus ``other_jobs``, e.g. per-shard jobs) with queue wait, elapsed time,
    GPUs, GPU-hours, model loads and work, and the totals."""
    listing = f"""for A in {_run_allocs(settings, run_ids) if run_ids else ""}; do
  [ -f "$A/jobs.txt" ] || continue
  for j in $(cat "$A/jobs.txt"); do
    printf 'server %s %s %s ' "$(basename "$(dirname "$A")")" "$(basename "$A")" "$j"
    tr -d '\\n' < "$A/jobs/$j.json" 2>/dev/null; echo
  done
done
"""
    with SSHConnectionPool(settings.ssh_resource()) as pool:
        out = pool.run(listing) if run_ids else ""
        servers: dict[str, dict] = {}
        for line in out.splitlines():
            parts = line.split(" ", 4)
            if parts[0] == "server" and len(parts) >= 4:
                body = parts[4] if len(parts) > 4 else ""
                servers[parts[3]] = {
                    "run_id": parts[1],
                    "model_key": parts[2],
                    **json.loads(body or "{}"),
                }
        ids = [*servers, *(j for j in other_jobs if j not in servers)]
        acct = (
            pool.run(
                f"sacct -X -n -P -j {','.join(ids)} "
                "-o JobIDRaw,State,Submit,Start,End,ElapsedRaw,AllocTRES 2>/dev/null || true"
            )
            if ids
            else ""
        )
    rows = []
    for line in acct.splitlines():
        fields = line.split("|")
        if len(fields) < 7 or fields[0] not in ids:
            continue
        job, state, submit, start, _end, elapsed, tres = fields[:7]
        server = servers.get(job, {})
        gpus = _gpus(tres) or (settings.gpus_per_node if start != "Unknown" else 0)
        elapsed_s = float(elapsed or 0)
        rows.append(
            {
                "job_id": job,
                "run_id": server.get("run_id", ""),
                "kind": "llm-server" if server else "per-shard",
                "model_key": server.get("model_key", ""),
                "state": state.split()[0] if state else "",
                "exit_reason": server.get("exit_reason"),
                "queue_wait_s": _seconds_between(submit, start) if start != "Unknown" else None,
                "elapsed_s": elapsed_s,
                "gpus": gpus,
                "gpu_hours": round(elapsed_s * gpus / 3600, 6),
                "model_loads": server.get("model_loads", 1 if not server else 0),
                "load_s": server.get("load_s"),
                "shards": server.get("shards"),
                "requests": server.get("requests"),
                "tokens": _tokens(server) if server else None,
            }
        )
    servers_seen = [r for r in rows if r["kind"] == "llm-server"]
    return {
        "jobs": rows,
        "allocations": len(servers_seen),
        "models": len({(r["run_id"], r["model_key"]) for r in servers_seen}),
        "slurm_jobs": len(rows),
        "model_loads": sum(r["model_loads"] or 0 for r in rows),
        "gpu_hours": round(sum(r["gpu_hours"] for r in rows), 6),
        "queue_wait_s": round(sum(r["queue_wait_s"] or 0 for r in rows), 1),
    }
