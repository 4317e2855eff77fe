"""One build per SABER home at a time: ``<home>/build.lock``.

The lock is an ``flock`` on that file, so the kernel frees it the moment its holder dies,
however it dies (SIGKILL and OOM kills included). The file's text says who holds it: ``pid P,
parent Q, started T``. Taking the lock:

* free, with the text of an earlier holder still there (a holder that died without tidying
  up): the lock is taken over and the ``notice`` says whose it was;
* held by a process whose parent is no longer the one it had when it took the lock (the worker
  of a ``saber build`` whose supervisor died: it is stopping, see ``saber_cli/parent_watch.py``),
  or by a process that is gone (a leftover child still has the file open): waited for, up to
  ``ORPHAN_WAIT_S``, with a notice; then :class:`BuildLockedError` naming who holds the file;
* held by a running build: :class:`BuildLockedError` at once, naming it.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ORPHAN_WAIT_S = 30.0
RECORD = re.compile(r"pid (\d+)(?:, parent (\d+))?, started (\S+)")


class BuildLockedError(RuntimeError):
    """Another build holds the SABER home's build lock."""


@dataclass(frozen=True)
class Holder:
    """Who wrote the lock file: its pid, its parent's pid then, and when."""

    pid: int
    parent: int | None
    started: str

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        found = RECORD.search(text)
        if found is None:
            return None
        parent = int(found[2]) if found[2] else None
        return cls(int(found[1]), parent, found[3])

    @classmethod
    def this_process(cls) -> Holder:
        started = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(os.getpid(), os.getppid(), started)

    def text(self) -> str:
        return f"pid {self.pid}, parent {self.parent}, started {self.started}"

    def state(self) -> str:
        """``running``, ``orphaned`` (alive, its parent changed) or ``gone``."""
        stat = _stat(self.pid)
        if stat is None or stat[0] in "ZX":
            return "gone"
        return "orphaned" if self.parent is not None and stat[1] != self.parent else "running"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a live process from ``/proc``; None if there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _openers(path: Path) -> list[int]:
    """The pids that have ``path`` open (from ``/proc/*/fd``; those this user may read)."""
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == str(path) for fd in fd_dir.iterdir()):
                found.append(int(fd_dir.parent.name))
        except OSError:
            continue
    return sorted(set(found) - {os.getpid()})


def _read(handle) -> Holder | None:
    handle.seek(0)
    return Holder.parse(handle.read())


def _acquire(handle, path: Path, notice: Callable[[str], None], wait_s: float) -> None:
    deadline = None
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _read(handle)
            state = holder.state() if holder else "running"
            if state == "running" or (deadline is not None and time.monotonic() > deadline):
                detail = holder.text() if holder else "unknown"
                if state != "running":
                    detail += f", {state}; the file is open in pid(s) {_openers(path)}"
                raise BuildLockedError(
                    f"another SABER build is running on {path.parent} ({detail}); wait for it "
                    "to finish or use another SABER_HOME"
                ) from None
            if deadline is None:
                deadline = time.monotonic() + wait_s
                why = (
                    f"pid {holder.pid} lost its supervisor and is stopping"
                    if state == "orphaned"
                    else f"pid {holder.pid} is gone but a leftover process still has it open"
                )
                notice(f"saber build: waiting for the build lock ({why}; up to {wait_s:.0f}s)")
            time.sleep(0.1)


@contextmanager
def build_lock(
    home: Path, notice: Callable[[str], None] | None = None, wait_s: float = ORPHAN_WAIT_S
) -> Iterator[None]:
    """Hold ``<home>/build.lock`` for a whole build (module docstring); ``notice`` receives the
    one-line messages about a taken-over or awaited lock."""
    notice = notice or (lambda message: print(message, file=sys.stderr, flush=True))
    home.mkdir(parents=True, exist_ok=True)
    path = (home / "build.lock").resolve()
    handle = path.open("a+")
    try:
        _acquire(handle, path, notice, wait_s)
    except BaseException:
        handle.close()
        raise
    try:
        stale = _read(handle)
        if stale is not None:
            notice(
                f"saber build: took over the build lock of pid {stale.pid} (started "
                f"{stale.started}), which ended without releasing it; its build resumes here"
            )
        handle.seek(0)
        handle.truncate()
        handle.write(Holder.this_process().text())
        handle.flush()
        yield
    finally:
        handle.seek(0)
        handle.truncate()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
