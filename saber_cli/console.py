"""What ``saber build`` shows its user: a line per finished step, the summary, and on failure
one short block. Everything else — Dagster's event log, warnings, tracebacks — goes to the
build's log file (``<home>/logs/build-….log``), whose path the header and the block print.

The supervisor hands the worker its terminal as two extra file descriptors (``CONSOLE_FDS``);
the worker's own stdout and stderr are the log file, so each console line is copied there too.
With ``--debug`` the supervisor shows the log itself as it grows, and the worker writes its
lines to the log only (once on the terminal, not twice).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from saber_core.errors import InputError

if TYPE_CHECKING:
    import dagster as dg

CONSOLE_FDS = "SABER_CONSOLE_FDS"  # "<out fd>,<err fd>" of the supervisor's terminal
MESSAGE_LINES = 8  # lines of an unexpected error's message shown in the block


class Console:
    """The terminal's out and err streams (None: not shown), each line also copied to ``log``."""

    def __init__(self, out: TextIO | None, err: TextIO | None, log: TextIO | None) -> None:
        self.out, self.err, self.log = out, err, log

    @classmethod
    def of_worker(cls, debug: bool) -> Console:
        """The supervisor's terminal (``CONSOLE_FDS``) with a copy in the log (the worker's
        stderr); without a supervisor, this process's own streams."""
        fds = os.environ.get(CONSOLE_FDS)
        if not fds:
            return cls(sys.stdout, sys.stderr, None)
        if debug:
            return cls(None, None, sys.stderr)
        out, err = (os.fdopen(int(fd), "w", buffering=1) for fd in fds.split(","))
        return cls(out, err, sys.stderr)

    def say(self, text: str) -> None:
        """A line of progress or of the summary (stdout)."""
        self._write(self.out, text)

    def warn(self, text: str) -> None:
        """A notice or the failure block (stderr)."""
        self._write(self.err, text)

    def _write(self, stream: TextIO | None, text: str) -> None:
        for target in (stream, self.log):
            if target is None:
                continue
            try:  # a terminal that went away must not stop the build
                target.write(text + "\n")
                target.flush()
            except (OSError, ValueError):
                pass


class StepProgress:
    """A Dagster event listener: one console line per finished step (its time, ``reused`` when
    its stored tables were reused), and the step that failed."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.reused: set[str] = set()
        self.failed_step: str | None = None

    def __call__(self, entry: dg.EventLogEntry) -> None:
        event = entry.dagster_event
        if event is None or event.step_key is None:
            return
        kind, step = event.event_type_value, event.step_key
        if kind == "ASSET_MATERIALIZATION":
            reused = event.event_specific_data.materialization.metadata.get("reused")
            if reused is not None and reused.value:
                self.reused.add(step)
        elif kind == "STEP_SUCCESS":
            seconds = event.event_specific_data.duration_ms / 1000
            note = "  reused" if step in self.reused else ""
            self.console.say(f"  {step:<28} {seconds:7.1f}s{note}")
        elif kind == "STEP_UP_FOR_RETRY":
            self.console.say(f"  {step:<28} retrying")
        elif kind == "STEP_FAILURE":
            self.failed_step = step
            self.console.say(f"  {step:<28}   failed")


def failure_block(
    exc: BaseException, step: str | None, log: Path | None, debug: bool = False
) -> str:
    """The short block a failed build prints: what went wrong (for an :class:`InputError` the
    rows, counts and three examples), the setting that fixes it, and where the log is."""
    where = f" at step {step}" if step else ""
    lines = [f"saber build failed{where}"]
    if isinstance(exc, InputError):
        lines.append(f"  what: {exc.what}")
        if exc.rows():
            lines.append(f"  rows: {exc.rows()}")
        if exc.fix:
            lines.append(f"  fix:  {exc.fix}")
    else:
        message = (str(exc).strip() or "(no message)").splitlines()
        shown = message[:MESSAGE_LINES] + (["…"] if len(message) > MESSAGE_LINES else [])
        lines.append(f"  what: {type(exc).__name__}: {shown[0]}")
        lines += [f"        {line}" for line in shown[1:]]
    if log is not None:
        hint = "" if debug else " (the traceback: saber build --debug)"
        lines.append(f"  log:  {log}{hint}")
    return "\n".join(lines)
