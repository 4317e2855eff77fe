"""Opening a DuckDB file that other processes may hold (Dagster-free).

DuckDB lets one process at a time open a file for writing (and none while it is open for
writing elsewhere): under Dagster's multiprocess executor two steps may touch the same file at
once. Opening is retried with backoff while the file is locked, so processes take turns; a
connection is held only for one short operation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

DEFAULT_LOCK_TIMEOUT_S = 300.0


def is_lock_error(error: BaseException) -> bool:
    """Whether a DuckDB error says another process holds the file."""
    return isinstance(error, duckdb.IOException) and "lock" in str(error).lower()


@contextmanager
def duckdb_connection(
    path: str | Path, read_only: bool = False, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived connection to ``path``, waiting (up to ``timeout_s``) for other processes'
    locks; closed afterwards. A missing folder is created for a writable connection."""
    path = Path(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as err:
            if not is_lock_error(err) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
    try:
        yield con
    finally:
        con.close()
