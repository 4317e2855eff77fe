"""The LLM server of an allocation (``mode: allocation``): load the model once, then answer the
shards the build's stages put into the allocation's inbox until the run ends.

One server job runs per (run, model) at a time; the first stage of a run that needs the model
submits it (:mod:`saber_slurm.allocation`). Its folder
``A = <remote_base>/allocations/<run_id>/<model_key>`` holds:

``server.json``          what to serve (backend spec and config) and how (written by the client)
``server.sbatch``        the batch script; ``jobs.txt``: every job submitted for ``A``, in order
``inbox/<seq>-<key>``    shards waiting, oldest first (their requests are in ``<shards>/<key>/``)
``active/<seq>-<key>``   the shard a job is answering; a successor puts it back into the inbox
``jobs/<job>.json``      each job's status: model loads and load time, shards, requests, tokens,
                         state and exit reason (``jobs/slurm-<job>.out``: its log)
``shutdown``             the run ended: the server exits

A shard's results land in ``<shards>/<key>/`` — ``results.parquet`` and ``stats.json``, written
only when the whole shard is answered (or ``error.json``) — the same content-addressed folders as
the per-shard mode, so a shard answered once is never answered again, whichever run asks.

Walltime relay: the job stops taking shards ``signal_lead_seconds`` before its time limit (read
from ``squeue`` at start; SLURM's ``--signal=B:USR1@lead`` asks the same), finishes the shard at
hand and exits (``drained``). SIGTERM (preemption, ``scancel``) abandons the shard at hand at once
(nothing is written). The client sees the job gone with shards pending and submits a successor,
which puts abandoned shards back into the inbox and loads the model once. Without work for
``idle_timeout`` seconds the job exits on its own (``idle``).

Run inside the job as ``python -m saber_compute.llm_server --alloc A --shards S``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from saber_compute.llm.interface import LLMEngine, build_engine
from saber_compute.llm_shard import (
    STATS,
    answer_shard,
    node_provenance,
    payload_version,
    write_atomic,
)

SERVER_JSON = "server.json"
ERROR = "error.json"
SHUTDOWN = "shutdown"
CLEAN_EXITS = ("drained", "idle", "shutdown")


def parse_slurm_duration(text: str) -> float | None:
    """Seconds of a duration as ``squeue`` prints it (``[D-]HH:MM:SS``, ``MM:SS``; after a day
    part ``HH[:MM[:SS]]``), None when unlimited or unknown (``UNLIMITED``, ``NOT_SET``, '')."""
    text = text.strip()
    days = "0"
    if "-" in text:
        days, _, text = text.partition("-")
        parts = text.split(":")
        parts += ["0"] * (3 - len(parts))
    else:
        parts = text.split(":")
        parts = ["0"] * (3 - len(parts)) + parts
    if len(parts) != 3 or not all(p.isdigit() for p in [days, *parts]):
        return None
    hours, minutes, seconds = (int(p) for p in parts)
    return int(days) * 86400 + hours * 3600 + minutes * 60 + seconds


def time_left_seconds(job_id: str) -> float | None:
    """The job's remaining walltime according to ``squeue`` (None outside SLURM)."""
    if not job_id.isdigit():
        return None
    try:
        done = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_slurm_duration(done.stdout) if done.returncode == 0 else None


class LLMServer:
    """The loop of one server job over one allocation folder."""

    def __init__(
        self,
        alloc: Path,
        shards: Path,
        log: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.alloc, self.shards, self.log, self.clock = alloc, shards, log, clock
        self.settings: dict[str, Any] = json.loads((alloc / SERVER_JSON).read_text())
        self.job = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
        for name in ("inbox", "active", "jobs"):
            (alloc / name).mkdir(parents=True, exist_ok=True)
        self.drain_requested = False
        self.status: dict[str, Any] = {
            "job": self.job,
            "state": "starting",
            "model_loads": 0,
            "load_s": 0.0,
            "shards": 0,
            "shard_errors": 0,
            "requests": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "generate_s": 0.0,
            "answered": [],
            "exit_reason": None,
            "started_at": time.time(),
            "ready_at": None,
            "ended_at": None,
            "payload_version": payload_version(),
        }

    # -- status -----------------------------------------------------------------------------
    def write_status(self, **changes: Any) -> None:
        """Update and atomically rewrite ``jobs/<job>.json``."""
        self.status.update(changes)
        path = self.alloc / "jobs" / f"{self.job}.json"
        write_atomic(path, lambda p: p.write_text(json.dumps(self.status, sort_keys=True)))

    def finish(self, reason: str) -> str:
        """Record the exit reason (and time) and return it."""
        self.write_status(state="exited", exit_reason=reason, ended_at=time.time())
        self.log(f"saber-llm-server: job {self.job} exits ({reason})")
        return reason

    # -- signals ----------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """USR1 (SLURM's pre-walltime signal): drain. TERM/INT (preemption, scancel): abandon
        the shard at hand and exit now — its results are never half written."""

        def drain(signum: int, frame: Any) -> None:
            self.drain_requested = True
            self.log("saber-llm-server: pre-walltime signal, taking no new shards")

        def terminate(signum: int, frame: Any) -> None:
            try:
                self.finish("terminated")
            finally:
                os._exit(128 + signum)

        signal.signal(signal.SIGUSR1, drain)
        signal.signal(signal.SIGTERM, terminate)
        signal.signal(signal.SIGINT, terminate)

    # -- the inbox ---------------------------------------------------------------------------
    def requeue_abandoned(self) -> list[str]:
        """Put shards a predecessor was answering when it ended back into the inbox."""
        moved = []
        for entry in sorted((self.alloc / "active").iterdir()):
            os.replace(entry, self.alloc / "inbox" / entry.name)
            moved.append(entry.name)
        if moved:
            self.log(f"saber-llm-server: {len(moved)} abandoned shard(s) back in the inbox")
        return moved

    def claim(self) -> Path | None:
        """Move the oldest inbox entry to ``active/`` and return it (None: inbox empty)."""
        for entry in sorted((self.alloc / "inbox").iterdir()):
            if entry.name.startswith("."):
                continue
            target = self.alloc / "active" / entry.name
            try:
                os.replace(entry, target)
            except FileNotFoundError:
                continue
            return target
        return None

    def answer(self, entry: Path, backend: LLMEngine) -> None:
        """Answer one claimed shard (results, or ``error.json``), then drop its entry."""
        key = entry.name.rsplit("-", 1)[-1]
        shard_dir = self.shards / key
        if (shard_dir / STATS).exists():
            self.log(f"saber-llm-server: shard {key} already answered")
        else:
            try:
                stats = answer_shard(
                    shard_dir,
                    backend,
                    int(self.settings.get("progress_every") or 2048),
                    self.log,
                    self.where,
                )
            except Exception as exc:
                self._error(shard_dir, exc)
            else:
                s = self.status
                self.write_status(
                    shards=s["shards"] + 1,
                    requests=s["requests"] + stats["n_requests"],
                    prompt_tokens=s["prompt_tokens"] + stats["prompt_tokens"],
                    completion_tokens=s["completion_tokens"] + stats["completion_tokens"],
                    generate_s=round(s["generate_s"] + stats["generate_s"], 3),
                    answered=[*s["answered"], key],
                )
                self.log(f"saber-llm-server: answered shard {key} ({stats['n_requests']} requests)")
        entry.unlink(missing_ok=True)

    def _error(self, shard_dir: Path, exc: Exception) -> None:
        text = "".join(traceback.format_exception(exc))[-4000:]
        self.log(f"saber-llm-server: shard {shard_dir.name} failed: {exc!r}\n{text}")
        record = {"job": self.job, "error": f"{type(exc).__name__}: {exc}", "traceback": text}
        if shard_dir.is_dir():
            write_atomic(shard_dir / ERROR, lambda p: p.write_text(json.dumps(record)))
        self.write_status(shard_errors=self.status["shard_errors"] + 1)

    # -- the loop ----------------------------------------------------------------------------
    def serve(self, make_backend: Callable[[], LLMEngine] | None = None) -> str:
        """Load the model once and answer shards until shutdown, drain, deadline or idleness;
        return the exit reason."""
        lead = float(self.settings.get("signal_lead_seconds") or 0)
        idle_timeout = float(self.settings.get("idle_timeout") or 900)
        poll = float(self.settings.get("inbox_poll_seconds") or 0.5)
        left = time_left_seconds(self.job)
        deadline = self.clock() + left - lead if left is not None else None
        self.where = node_provenance()
        expected = self.settings.get("payload_version")
        if expected and expected != self.status["payload_version"]:
            self.write_status(state="error")
            raise RuntimeError(
                f"this job runs saber payload code {self.status['payload_version']}, the build "
                f"sent {expected}: the cluster's payload environment runs different code"
            )
        self.write_status(state="loading", **self.where)
        self.requeue_abandoned()
        spec, config = self.settings["backend_spec"], self.settings.get("backend_config") or {}
        self.log(f"saber-llm-server: job {self.job} on {self.where['slurm_node']}: loading {spec}")
        started = time.perf_counter()
        backend = make_backend() if make_backend else build_engine(spec, config)
        backend.load()
        load_s = round(time.perf_counter() - started, 3)
        self.write_status(
            state="serving",
            model_loads=1,
            load_s=load_s,
            ready_at=time.time(),
            identity=backend.identity(),
        )
        self.log(f"saber-llm-server: model load 1 of job {self.job} done in {load_s:.1f}s")
        idle_since = self.clock()
        while True:
            if (self.alloc / SHUTDOWN).exists():
                return self.finish("shutdown")
            if self.drain_requested or (deadline is not None and self.clock() >= deadline):
                return self.finish("drained")
            entry = self.claim()
            if entry is None:
                if self.clock() - idle_since >= idle_timeout:
                    return self.finish("idle")
                time.sleep(poll)
                continue
            self.answer(entry, backend)
            idle_since = self.clock()


def main(argv: list[str] | None = None) -> int:
    """Entry point inside the allocation's SLURM job."""
    parser = argparse.ArgumentParser(prog="saber-llm-server")
    parser.add_argument("--alloc", type=Path, required=True, help="the allocation folder")
    parser.add_argument("--shards", type=Path, required=True, help="the shard folders' root")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    server = LLMServer(args.alloc, args.shards, log)
    server.install_signal_handlers()
    try:
        reason = server.serve()
    except Exception:
        log(traceback.format_exc())
        server.finish("error")
        return 1
    return 0 if reason in CLEAN_EXITS else 1


if __name__ == "__main__":
    sys.exit(main())
