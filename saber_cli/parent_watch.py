"""The worker's watch on its supervisor: when the supervisor dies, the worker stops.

``saber build`` runs the build in a worker with a session of its own, so a signal to the
supervisor's process group (a dropped terminal, an OOM kill, ``kill -9 -PGID``) does not reach
it. The worker therefore watches its parent two ways:

* the kernel's **parent-death signal**: ``prctl(PR_SET_PDEATHSIG, SIGUSR2)`` makes Linux signal
  the worker the moment its parent exits. It is set first thing in the worker (before any heavy
  import); ``getppid()`` is compared with the expected supervisor right after, which closes the
  window between the fork and the ``prctl`` call (a supervisor that died in it has already
  handed the worker to init). SIGUSR2, not SIGTERM: Dagster maps SIGTERM to its own interrupt
  handling while a run executes, and nothing else in the build uses SIGUSR2;
* a **parent-watch thread** polling ``getppid()`` every ``POLL_S`` seconds, for platforms
  without ``prctl`` and for a main thread that cannot run a signal handler soon (a Python
  handler runs between bytecodes, never inside a long native call).

Whichever notices first makes the thread call ``on_orphaned`` once (the signal handler only
wakes it). Signals sent to the worker itself keep their usual meaning.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_DEATH_SIGNAL = signal.SIGUSR2
POLL_S = 0.1


def set_parent_death_signal(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies; False where
    ``prctl`` is unavailable (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(supervisor: int, on_orphaned: Callable[[], None]) -> threading.Thread:
    """Call ``on_orphaned`` (once, from a daemon thread) as soon as this process's parent is no
    longer ``supervisor``; returns the thread. Call from the main thread (it installs the
    handler of ``PARENT_DEATH_SIGNAL``)."""
    wake = threading.Event()
    signal.signal(PARENT_DEATH_SIGNAL, lambda signum, frame: wake.set())
    set_parent_death_signal(PARENT_DEATH_SIGNAL)

    def watch() -> None:
        while os.getppid() == supervisor:
            wake.wait(POLL_S)
        on_orphaned()

    thread = threading.Thread(target=watch, name="saber-parent-watch", daemon=True)
    thread.start()  # its first check runs at once: a supervisor already gone is seen now
    return thread
