"""``saber build`` under a supervisor: clean stops, whoever stops it.

The build runs in a child process (``saber build --worker``, a session of its own) with a run
id the supervisor chose; its stdout and stderr go to the build's log file
(``<home>/logs/build-<time>-<run>.log``), its console lines to the supervisor's terminal
(:mod:`saber_cli.console`). Its Dagster instance is ``$DAGSTER_HOME``, else the SABER home's
``dagster_home`` — the one ``make ui`` shows.

**A signal to the supervisor** (SIGTERM or SIGINT): the supervisor

1. kills the child's process group (SIGKILL: nothing the child does — a blocking SLURM client, a
   model forward pass, a DuckDB write — can hold the stop up, and nothing is lost: every answer
   already received is committed in the call cache, every stage records its fingerprint only
   after its tables, so a killed build resumes where it stopped; ``test_reliability.py`` kills
   builds at random points and checks exactly that);
2. cancels every SLURM job of the run (``scancel`` of the allocation's server jobs and of any
   per-shard job whose working directory belongs to the run; ``shutdown`` files) over the one
   shared SSH connection;
3. marks the Dagster run canceled and exits with 128 + the signal.

After the build, stopped or not, the local LLM servers of its SABER home (the vLLM engine's
subprocess, :mod:`saber_llm.engine_server`) are told to exit
(``SABER_KEEP_LLM_SERVER=1`` keeps them for the next build; they exit after their idle timeout).

**The worker killed by someone else** (the OOM killer, ``kill -9`` of its pid): the supervisor
sees it die and does steps 2 and 3.

**The supervisor killed** (SIGKILL to its process group: a dropped terminal, an OOM kill of the
supervisor, ``kill -9``): the worker notices at once (:mod:`saber_cli.parent_watch`), starts the
*reaper* (``saber build --reap``, a session of its own, logging to the build's log), and kills
its own process group, which frees the build lock in the same instant; the reaper does steps
2 and 3. A ``saber build`` started right away resumes the run.

Shards the cluster finished are kept in ``<remote_base>/shards/`` and reused by the next build;
the shard being answered at the stop is abandoned (its results are never half written).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from saber_cli.console import CONSOLE_FDS
from saber_cli.dagster_home import PROJECT_ROOT, dagster_home
from saber_store.paths import SaberPaths

STOP_WAIT_S = 2.0  # how long the supervisor waits for cancelled jobs to leave the queue
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GROUP_WAIT_S = 10.0  # how long the reaper waits for a killed process group to be gone
KEEP_SERVER_ENV = "SABER_KEEP_LLM_SERVER"


def worker_command(profile: str | None, run_id: str, log: Path, debug: bool = False) -> list[str]:
    """The child's command line: the same ``saber build``, as the worker of run ``run_id``
    supervised by this process."""
    command = [sys.executable, "-m", "saber_cli.main", "build", "--worker", "--run-id", run_id]
    command += ["--supervisor", str(os.getpid()), "--log", str(log)]
    command += ["--debug"] if debug else []
    return command + (["--profile", profile] if profile else [])


def reaper_command(profile: str | None, run_id: str, group: int, log: Path) -> list[str]:
    """The reaper's command line: stop process group ``group`` and end run ``run_id``."""
    command = [sys.executable, "-m", "saber_cli.main", "build", "--reap", "--run-id", run_id]
    command += ["--group", str(group), "--log", str(log)]
    return command + (["--profile", profile] if profile else [])


def worker_env(home: Path) -> dict[str, str]:
    """The environment of the child: this one, with this checkout first on ``PYTHONPATH`` (the
    worker runs the supervisor's code even when the venv's install points elsewhere) and
    ``DAGSTER_HOME`` set (:func:`saber_cli.dagster_home.dagster_home`)."""
    paths = [str(PROJECT_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "DAGSTER_HOME": str(dagster_home(home)),
    }


def log_path(home: Path, run_id: str) -> Path:
    """``<home>/logs/build-<UTC time>-<run id prefix>.log`` (its folder created)."""
    folder = SaberPaths.at(home).logs_dir
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"build-{datetime.now(UTC):%Y%m%d-%H%M%S}-{run_id[:8]}.log"


def _show_log(path: Path, done: threading.Event) -> None:
    """``--debug``: copy the log to stderr as it grows, until ``done`` (then the rest)."""
    with path.open("rb") as handle:
        while True:
            finished = done.wait(0.2)
            sys.stderr.buffer.write(handle.read())
            sys.stderr.flush()
            if finished:
                return


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """The worker, its output in ``log``, this terminal passed on as ``CONSOLE_FDS``."""
    console = [os.dup(1), os.dup(2)]
    try:
        with log.open("ab") as sink:
            return subprocess.Popen(
                command,
                env={**env, CONSOLE_FDS: ",".join(map(str, console))},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                pass_fds=console,
                start_new_session=True,
            )
    finally:
        for fd in console:
            os.close(fd)


def supervise_build(profile: str | None, debug: bool = False) -> int:
    """Run the build in a child process; stop it cleanly on SIGTERM/SIGINT (module docstring).
    Returns the child's exit code, or 128 + the signal that stopped the build."""
    run_id = str(uuid.uuid4())
    try:
        home = SaberPaths.for_profile(profile).home
    except ValueError as err:  # an unknown profile
        print(f"saber build: {err}", file=sys.stderr)
        return 2
    log = log_path(home, run_id)
    print(f"saber build: run {run_id[:8]} on {home}; log {log}", flush=True)
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    done = threading.Event()
    try:
        child = _spawn(worker_command(profile, run_id, log, debug), worker_env(home), log)
        if debug:
            threading.Thread(target=_show_log, args=(log, done), daemon=True).start()
        while child.poll() is None and not received:
            time.sleep(0.05)
        if received:
            return stop_build(child, received[0], profile, run_id)
        if child.returncode < 0:  # killed by someone else (the OOM killer, kill -9)
            return worker_killed(child, profile, run_id, log)
        return child.returncode
    finally:
        release_engine_servers(profile)
        done.set()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _kill_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_build(child: subprocess.Popen, signum: int, profile: str | None, run_id: str) -> int:
    """Steps 1-3 of the module docstring; returns 128 + ``signum``."""
    started = time.monotonic()
    name = signal.Signals(signum).name
    print(f"saber build: {name}: stopping run {run_id}", file=sys.stderr, flush=True)
    _kill_group(child.pid, signal.SIGKILL)  # the child and anything it started in its group
    child.wait()
    end_run(profile, run_id, f"saber build was stopped by {name}")
    print(
        f"saber build: stopped in {time.monotonic() - started:.1f}s; run `saber build` again "
        "to resume (finished stages and every answer already paid for are kept)",
        file=sys.stderr,
        flush=True,
    )
    return 128 + signum


def worker_killed(child: subprocess.Popen, profile: str | None, run_id: str, log: Path) -> int:
    """The worker died of a signal nobody sent through the supervisor: end the run (steps 2
    and 3) and say so; returns 128 + the signal."""
    signum = -child.returncode
    name = signal.Signals(signum).name
    _kill_group(child.pid, signal.SIGKILL)  # whatever it started in its group
    print(
        f"saber build: the build worker (pid {child.pid}) was killed by {name}"
        + (" (out of memory? see `dmesg`)" if signum == signal.SIGKILL else "")
        + f"; log {log}",
        file=sys.stderr,
        flush=True,
    )
    end_run(profile, run_id, f"the build worker was killed by {name}")
    print("saber build: run `saber build` again to resume", file=sys.stderr, flush=True)
    return 128 + signum


def _group_alive(group: int) -> bool:
    """Is a process of ``group`` still running (zombies waiting for their reaper aside)?"""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] not in "ZX":
            return True
    return False


def reap_orphan(profile: str | None, run_id: str, group: int) -> int:
    """The reaper (module docstring): make sure process group ``group`` is gone, then end run
    ``run_id`` (steps 2 and 3). Its output is the build's log."""
    print(
        f"saber build: the supervisor of run {run_id} died; stopping its worker "
        f"(process group {group})",
        flush=True,
    )
    _kill_group(group, signal.SIGKILL)
    deadline = time.monotonic() + GROUP_WAIT_S
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    end_run(profile, run_id, "the supervisor of saber build died")
    print("saber build: worker stopped; run `saber build` again to resume", flush=True)
    return 0


def end_run(profile: str | None, run_id: str, reason: str) -> None:
    """Steps 2 and 3 of the module docstring (the worker is already gone)."""
    from saber_config import load_build_config

    build = load_build_config(profile)
    if build.execution == "slurm":
        from saber_slurm import slurm_dispatch_from_build, stop_run

        try:
            cancelled = stop_run(slurm_dispatch_from_build(build), [run_id], STOP_WAIT_S)
            print(f"saber build: cancelled SLURM jobs {cancelled or 'none'}", file=sys.stderr)
        except Exception as exc:  # report, still exit: the orphan sensor cancels later
            print(f"saber build: could not cancel SLURM jobs: {exc}", file=sys.stderr)
    _mark_canceled(build.home_path, run_id, reason)


def release_engine_servers(profile: str | None) -> None:
    """Tell the local LLM servers of the build's SABER home to exit (the vLLM engine's
    subprocess; each finishes the shard at hand), unless ``SABER_KEEP_LLM_SERVER=1``."""
    if os.environ.get(KEEP_SERVER_ENV) == "1":
        return
    from saber_config import load_build_config
    from saber_llm.engine_server import shutdown_servers

    try:
        home = load_build_config(profile).home_path
    except ValueError:  # a config the build already reported as invalid: it started no server
        return
    try:
        told = shutdown_servers(home)
    except Exception as exc:  # a courtesy: the servers exit after their idle timeout anyway
        print(f"saber build: could not reach the local LLM servers: {exc}", file=sys.stderr)
        return
    if told:
        print(f"saber build: told {len(told)} local LLM server(s) to exit", file=sys.stderr)


def _mark_canceled(home: Path, run_id: str, reason: str) -> None:
    """Mark the run canceled in the build's Dagster instance if it still looks alive."""
    from saber_cli.dagster_home import saber_instance

    try:
        instance = saber_instance(home)
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            instance.report_run_canceled(run, message=reason)
    except Exception as exc:
        print(f"saber build: could not mark run {run_id} canceled: {exc}", file=sys.stderr)
