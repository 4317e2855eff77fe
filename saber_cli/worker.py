"""The worker of ``saber build`` (``saber build --worker``): it watches its supervisor, runs the
build, and tells the user what happened in a few lines (:mod:`saber_cli.console`)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import traceback
from pathlib import Path


def watch_supervisor(args: argparse.Namespace) -> None:
    """Stop when the supervisor dies (:mod:`saber_cli.parent_watch`): start the reaper, then
    kill this process group — the build lock is free the moment this process is gone. Called
    first thing, before any heavy import."""
    if not args.supervisor:
        return
    from saber_cli.parent_watch import watch_parent
    from saber_cli.supervise import reaper_command

    def stop_orphaned() -> None:
        group = os.getpgrp()
        try:
            with Path(args.log).open("ab") as sink:
                subprocess.Popen(
                    reaper_command(args.profile, args.run_id, group, Path(args.log)),
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=sink,
                    start_new_session=True,
                )
        finally:
            os.killpg(group, signal.SIGKILL)

    watch_parent(args.supervisor, stop_orphaned)


def run_worker(args: argparse.Namespace) -> int:
    """Run the build as run ``args.run_id``: progress lines, then the summary (0); the failure
    block (1) or the lock holder (2). The traceback of a failure goes to the log."""
    from saber_cli.build import llm_summary, run_build, slurm_summary, summary
    from saber_cli.console import Console, StepProgress, failure_block
    from saber_config import load_build_config
    from saber_llm.engine_server import EngineServerError
    from saber_store.build_lock import BuildLockedError
    from saber_store.database import DuckDBStore

    console = Console.of_worker(args.debug)
    progress = StepProgress(console)
    try:
        build = load_build_config(args.profile)
        result = run_build(build, run_id=args.run_id, listeners=[progress], notice=console.warn)
    except (BuildLockedError, EngineServerError) as err:  # one line naming the fix
        console.warn(f"saber build: {err}")
        return 2
    except Exception as exc:
        traceback.print_exc()
        log = Path(args.log) if args.log else None
        console.warn(failure_block(exc, progress.failed_step, log, args.debug))
        return 1
    store = DuckDBStore(database=str(build.database_path))
    console.say(summary(store, build.export_dir))
    paid = llm_summary(store, result.run_id)
    if paid:
        console.say(paid)
    if build.execution == "slurm":
        try:
            console.say(slurm_summary(store, result.run_id))
        except Exception as exc:  # a report: the build itself succeeded
            console.warn(f"saber build: no SLURM cost summary ({exc})")
    return 0
