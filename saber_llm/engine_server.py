"""The local LLM server: an engine that lives in its own Python environment (vLLM in
``.venv-vllm``) answers a build's LLM calls from a subprocess, never inside the Dagster process.

It is the program a SLURM allocation runs (:mod:`saber_compute.llm_server`: load the model once,
answer request shards from an inbox folder, exit on a ``shutdown`` file or after
``idle_timeout`` seconds without work), started on this machine from the engine's environment
and shared by every step process of every build on the same SABER home: the UI's multiprocess
executor loads vLLM once, not once per step. Under ``<home>/llm-servers/``:

``<model key>/``   the server folder of one engine configuration (``server.json``, ``inbox/``,
                   ``active/``, ``jobs/<job>.json``: the server's status with its model loads and
                   load time; ``server.log``; ``server.pid``; ``lock``: who starts the server)
``shards/<key>/``  content-addressed request shards: ``requests.parquet`` in,
                   ``results.parquet`` + ``stats.json`` (or ``error.json``) out

A stage sends all its cache misses as one shard (a judge round across every query is one
``LLM.chat`` batch per sampling group, in prefix order) and waits for the results. A shard
answered once is never answered again (same requests, same engine → same folder), so a build
killed while the server answers resumes without paying twice. A server that died with a shard
in hand is restarted (its successor takes the shard back from ``active/``) at most
``max_restarts`` times; a server that failed to start (missing model folder, wrong vLLM) fails
the stage with its log's last line.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_compute.llm_server import SERVER_JSON, SHUTDOWN
from saber_compute.llm_shard import (
    REQUESTS,
    RESULTS,
    STATS,
    payload_version,
    requests_to_table,
    table_to_results,
    write_atomic,
)

SERVERS = "llm-servers"
SERVER_MODULE = "saber_compute.llm_server"
ERROR = "error.json"
_STARTED: dict[int, subprocess.Popen] = {}  # servers this process started (reaped when gone)


class EngineServerError(RuntimeError):
    """The local LLM server cannot answer (missing environment, failed start, repeated death)."""


def servers_root(home: Path) -> Path:
    """``<home>/llm-servers``: every local server folder and the shared shard folders."""
    return Path(home) / SERVERS


def shutdown_servers(home: Path) -> list[str]:
    """Ask every local LLM server of this SABER home to exit (``shutdown`` files; each exits
    after the shard at hand). Returns the server folders told."""
    root = servers_root(home)
    told = []
    for folder in sorted(root.glob("*/server.json")):
        (folder.parent / SHUTDOWN).touch()
        told.append(folder.parent.name)
    return told


class LocalEngineServer:
    """The client side: starts the shared server when needed, sends shards, reads results."""

    def __init__(
        self,
        home: Path,
        python: Path,
        spec: str,
        config: dict[str, Any],
        identity: dict[str, str],
        env: dict[str, str] | None = None,
        idle_timeout: float = 600.0,
        max_restarts: int = 2,
        poll_s: float = 0.5,
        log: Callable[[str], None] = print,
    ) -> None:
        if not Path(python).exists():
            raise EngineServerError(
                f"the engine's environment is missing ({python} does not exist): run "
                "`make vllm-env` (or point SABER_VLLM_ENV at a vLLM environment)"
            )
        self.python, self.spec, self.config, self.identity = Path(python), spec, config, identity
        self.env, self.idle_timeout, self.max_restarts = env or {}, idle_timeout, max_restarts
        self.poll_s, self.log = poll_s, log
        key = hashlib.sha256(json.dumps([spec, config], sort_keys=True).encode()).hexdigest()[:12]
        self.folder = servers_root(home) / key
        self.shards = servers_root(home) / "shards"
        self.restarts = 0
        self.batches: list[dict[str, Any]] = []

    chunk_size = 1 << 30  # one shard per call: a stage's misses are one batch

    # -- the server process -------------------------------------------------------------------
    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def server_pid(self) -> int | None:
        """The pid of this configuration's running server, else None."""
        try:
            pid = int((self.folder / "server.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _serving(pid) else None

    def ensure_running(self) -> int:
        """The running server's pid; starts one (under the folder's lock) when none runs."""
        with self._lock():
            pid = self.server_pid()
            if pid is not None:
                return pid
            settings = {
                "backend_spec": self.spec,
                "backend_config": self.config,
                "idle_timeout": self.idle_timeout,
                "inbox_poll_seconds": 0.2,
                "payload_version": payload_version(),
            }
            (self.folder / SHUTDOWN).unlink(missing_ok=True)
            write_atomic(self.folder / SERVER_JSON, lambda p: p.write_text(json.dumps(settings)))
            command = [str(self.python), "-m", SERVER_MODULE, "--alloc", str(self.folder),
                       "--shards", str(self.shards)]  # fmt: skip
            with open(self.folder / "server.log", "a") as out:
                child = subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **self.env},
                    start_new_session=True,  # a stopped build's process group kill spares it
                )
            _STARTED[child.pid] = child
            (self.folder / "server.pid").write_text(str(child.pid))
            self.log(f"LLM server: started {self.spec} from {self.python} (pid {child.pid})")
            return child.pid

    def status(self, pid: int) -> dict[str, Any]:
        """The server's status file (state, model loads, load time, shards, exit reason)."""
        try:
            return json.loads((self.folder / "jobs" / f"local-{pid}.json").read_text())
        except (OSError, ValueError):
            return {}

    def wait_loaded(self, pid: int) -> dict[str, Any]:
        """Wait until the server's model is loaded; its status (load time)."""
        while (status := self.status(pid)).get("state") != "serving":
            if not _serving(pid):
                self._after_death(pid, self.status(pid))
                pid = self.ensure_running()
            time.sleep(self.poll_s)
        return status

    def _log_tail(self) -> str:
        """The log's last exception line (``FileNotFoundError: ...``), else its last line."""
        try:
            lines = (self.folder / "server.log").read_text().strip().splitlines()
        except OSError:
            return ""
        errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b.*: ", line)]
        return (errors or lines or [""])[-1].strip()

    # -- shards -------------------------------------------------------------------------------
    def shard_key(self, table: Any) -> str:
        """The content address of a shard: the requests and the engine (spec, config, identity)."""
        payload = json.dumps(
            [self.spec, self.config, self.identity, table.to_pylist()], sort_keys=True, default=str
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    def stream(self, requests: Sequence[LLMRequest]) -> Iterator[tuple[list[int], list[LLMResult]]]:
        """All requests as one shard; yields ``(indices, results)`` once it is answered."""
        if not requests:
            return
        table = requests_to_table(requests)
        key = self.shard_key(table)
        shard = self.shards / key
        if not (shard / STATS).exists():
            shard.mkdir(parents=True, exist_ok=True)
            if not (shard / REQUESTS).exists():
                write_atomic(shard / REQUESTS, lambda p: pq.write_table(table, p))
            (shard / ERROR).unlink(missing_ok=True)
            self._submit(key)
            self._wait(shard)
        stats = json.loads((shard / STATS).read_text())
        if stats.get("identity") not in (None, self.identity):
            raise EngineServerError(
                f"shard {key}: the server's engine identity {stats['identity']} differs from the "
                f"build's {self.identity}; the engine environment runs different code"
            )
        self.batches.append(stats)
        rate = stats.get("prefix_cache_hit_rate")
        self.log(
            f"LLM server: {stats['n_requests']} requests in {stats['generate_s']:.1f}s "
            f"({stats['requests_per_s']} req/s, {stats['tokens_per_s']} tok/s"
            + (f", prefix-cache hit rate {rate:.1%})" if rate is not None else ")")
        )
        yield list(range(len(requests))), table_to_results(pq.read_table(shard / RESULTS))

    def _submit(self, key: str) -> None:
        inbox = self.folder / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        if not any(p.name.endswith(f"-{key}") for p in (self.folder / "active").glob("*")):
            (inbox / f"{time.time_ns()}-{key}").touch()

    def _wait(self, shard: Path) -> None:
        """Until the shard has results; restart a server that died, fail on one that cannot
        start or on a shard error."""
        pid = self.ensure_running()
        announced = self.status(pid).get("state") == "serving"  # loaded before this stage
        while not (shard / STATS).exists():
            if (shard / ERROR).exists():
                error = json.loads((shard / ERROR).read_text()).get("error", "")
                raise EngineServerError(f"LLM server: shard {shard.name} failed: {error}")
            status = self.status(pid)
            if not announced and status.get("state") == "serving":
                announced = True
                self.log(f"LLM server: model loaded in {status.get('load_s', 0):.1f}s")
            if not _serving(pid):
                if (shard / STATS).exists():
                    break
                self._after_death(pid, self.status(pid))
                pid = self.ensure_running()
                announced = False
            time.sleep(self.poll_s)

    def shutdown(self) -> None:
        """Ask this configuration's server to exit after the shard at hand."""
        if (self.folder / SERVER_JSON).exists():
            (self.folder / SHUTDOWN).touch()

    def _after_death(self, pid: int, status: dict[str, Any]) -> None:
        reap_group(pid)  # a killed server leaves its engine processes behind
        reason = status.get("exit_reason")
        if status.get("state") in (None, "starting", "loading", "error") or reason == "error":
            raise EngineServerError(
                f"LLM server (pid {pid}) exited while {status.get('state') or 'starting'}: "
                f"{self._log_tail() or 'no output'} (log: {self.folder / 'server.log'})"
            )
        if reason not in ("idle", "shutdown"):
            self.restarts += 1
            if self.restarts > self.max_restarts:
                raise EngineServerError(
                    f"LLM server died {self.restarts} times ({reason}); last log line: "
                    f"{self._log_tail()} (log: {self.folder / 'server.log'})"
                )
        self.log(f"LLM server (pid {pid}) is gone ({reason or 'killed'}): starting another")


def reap_group(pid: int) -> None:
    """SIGKILL what is left of a server's process group (its session: vLLM's engine core and
    workers outlive a server that was killed)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _serving(pid: int) -> bool:
    """The process runs (not a zombie) and is an LLM server."""
    child = _STARTED.get(pid)
    if child is not None:  # started here: /proc may still show this process before the exec
        if child.poll() is None:
            return True
        _STARTED.pop(pid, None)
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and SERVER_MODULE.encode() in cmdline
