"""``saber build`` under a supervisor: clean stops.

The build runs in a child process (``saber build --worker``, its own session) with a run id the
supervisor chose. On SIGTERM or SIGINT the supervisor

1. kills the child's process group (SIGKILL: nothing the child does — a blocking SLURM client, a
   model forward pass, a DuckDB write — can hold the stop up, and nothing is lost: every answer
   already received is committed in the call cache, every stage records its fingerprint only
   after its tables, so a killed build resumes where it stopped; ``test_reliability.py`` kills
   builds at random points and checks exactly that);
2. cancels every SLURM job of the run (``scancel`` of the allocation's server jobs and of any
   per-shard job whose working directory belongs to the run; ``shutdown`` files) over the one
   shared SSH connection;
3. marks the Dagster run canceled (under ``DAGSTER_HOME``) and exits with 128 + the signal.

After the build, stopped or not, the local LLM servers of its SABER home (the vLLM engine's
subprocess, :mod:`saber_resources.llm.engine_server`) are told to exit.

Shards the cluster finished are kept in ``<remote_base>/shards/`` and reused by the next build;
the shard being answered at the stop is abandoned (its results are never half written).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
STOP_WAIT_S = 2.0  # how long the supervisor waits for cancelled jobs to leave the queue
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
KEEP_SERVER_ENV = "SABER_KEEP_LLM_SERVER"


def worker_command(profile: str | None, run_id: str) -> list[str]:
    """The child's command line: the same ``saber build``, as the worker of run ``run_id``."""
    command = [sys.executable, "-m", "saber_cli.main", "build", "--worker", "--run-id", run_id]
    return command + (["--profile", profile] if profile else [])


def worker_env() -> dict[str, str]:
    """The environment of the child: this one, with this checkout first on ``PYTHONPATH`` (the
    worker runs the supervisor's code even when the venv's install points elsewhere)."""
    paths = [str(PROJECT_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def supervise_build(profile: str | None) -> int:
    """Run the build in a child process; stop it cleanly on SIGTERM/SIGINT (module docstring).
    Returns the child's exit code, or 128 + the signal after a stop."""
    run_id = str(uuid.uuid4())
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        child = subprocess.Popen(
            worker_command(profile, run_id), env=worker_env(), start_new_session=True
        )
        while child.poll() is None and not received:
            time.sleep(0.05)
        if not received:
            release_engine_servers(profile)
            return child.returncode
        return stop_build(child, received[0], profile, run_id)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _kill_group(child: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_build(child: subprocess.Popen, signum: int, profile: str | None, run_id: str) -> int:
    """Steps 1-3 of the module docstring; returns 128 + ``signum``."""
    started = time.monotonic()
    name = signal.Signals(signum).name
    print(f"saber build: {name}: stopping run {run_id}", file=sys.stderr, flush=True)
    _kill_group(child, signal.SIGKILL)  # the child and anything it started in its group
    child.wait()
    from saber_resources.config import load_build_config

    build = load_build_config(profile)
    if build.execution == "slurm":
        from saber_resources.slurm import slurm_dispatch_from_build, stop_run

        try:
            cancelled = stop_run(slurm_dispatch_from_build(build), [run_id], STOP_WAIT_S)
            print(f"saber build: cancelled SLURM jobs {cancelled or 'none'}", file=sys.stderr)
        except Exception as exc:  # report, still exit: the orphan sensor cancels later
            print(f"saber build: could not cancel SLURM jobs: {exc}", file=sys.stderr)
    release_engine_servers(profile)
    _mark_canceled(run_id)
    print(
        f"saber build: stopped in {time.monotonic() - started:.1f}s; run `saber build` again "
        "to resume (finished stages and every answer already paid for are kept)",
        file=sys.stderr,
        flush=True,
    )
    return 128 + signum


def release_engine_servers(profile: str | None) -> None:
    """Tell the local LLM servers of the build's SABER home to exit (the vLLM engine's
    subprocess; each finishes the shard at hand), unless ``SABER_KEEP_LLM_SERVER=1`` keeps them
    for the next build (they still exit after their idle timeout)."""
    if os.environ.get(KEEP_SERVER_ENV) == "1":
        return
    from saber_resources.config import load_build_config
    from saber_resources.llm.engine_server import shutdown_servers

    told = shutdown_servers(load_build_config(profile).home_path)
    if told:
        print(f"saber build: told {len(told)} local LLM server(s) to exit", file=sys.stderr)


def _mark_canceled(run_id: str) -> None:
    """Mark the run canceled in the instance under ``DAGSTER_HOME`` if it still looks alive."""
    if not os.environ.get("DAGSTER_HOME"):
        return
    import dagster as dg

    try:
        instance = dg.DagsterInstance.get()
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            instance.report_run_canceled(run, message="saber build was stopped by a signal")
    except Exception as exc:
        print(f"saber build: could not mark run {run_id} canceled: {exc}", file=sys.stderr)
