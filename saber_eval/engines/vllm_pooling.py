"""vLLM pooling engines: ``vllm-embed`` (``LLM.embed``: a bi-encoder, score = cos(e_q, e_d))
and ``vllm-score`` (``LLM.score``: a cross-encoder or sequence classifier on (query, document)).

vLLM never runs in this process: its pins conflict with the project's, so the model lives in
the pooling worker (:mod:`saber_compute.pooling_worker`) started from the vLLM environment
(``$SABER_VLLM_ENV``, else ``.venv-vllm``; ``make vllm-env``; inside a SLURM job the profile's
``vllm_env_path``). The worker loads the model once per retriever (every setting of an
evaluation) and answers one batch of ``batch_size`` texts or pairs per request, as a server
answering requests in batches of B would.

Options: ``dtype`` (auto|float32|float16|bfloat16; auto = the checkpoint's, as
sentence-transformers loads it), ``max_model_len``,
``gpu_memory_utilization`` (on a CPU build, the share of CPU memory it reserves: keep it low
there), ``tensor_parallel_size``, ``trust_remote_code``, ``enforce_eager``, ``env_path``;
``vllm-score`` also ``activation`` (false: a regression head's raw value instead of σ(logit)).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from saber_eval.engines.base import (
    EngineContext,
    EngineError,
    Retriever,
    Task,
    batched,
    local_model,
    parse_options,
)
from saber_eval.engines.bi_encoders import CachedBiEncoder
from saber_eval.registry import RetrieverEntry
from saber_llm.embeddings.cache import EmbeddingCache

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MARK = "@@saber "
WORKER = "saber_compute.pooling_worker"


@dataclass(frozen=True)
class VLLMOptions:
    """The engine settings of a vLLM pooling model."""

    dtype: str = "auto"
    max_model_len: int = 0
    gpu_memory_utilization: float = 0.3
    tensor_parallel_size: int = 1
    trust_remote_code: bool = False
    enforce_eager: bool = True
    env_path: str = ""
    activation: bool = True

    def worker_config(self, model: str, seed: int) -> dict[str, Any]:
        """The worker's config (``max_model_len`` 0 = the model's)."""
        config = {k: v for k, v in asdict(self).items() if k not in ("env_path", "activation")}
        config["max_model_len"] = self.max_model_len or None
        return {**config, "model": model, "seed": seed}


def vllm_python(env_path: str = "") -> Path:
    """The vLLM environment's interpreter (``env_path``, ``$SABER_VLLM_ENV``, ``.venv-vllm``)."""
    root = env_path or os.environ.get("SABER_VLLM_ENV") or PROJECT_ROOT / ".venv-vllm"
    return Path(root) / "bin" / "python"


class PoolingWorker:
    """A started pooling worker: send a request line, read its answer line."""

    def __init__(self, python: Path, config: dict[str, Any], spec: str) -> None:
        self.spec = spec
        self.log = Path(tempfile.mkstemp(prefix="saber-vllm-pooling-", suffix=".log")[1])
        paths = [str(PROJECT_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
        env = {
            **os.environ,
            "PYTHONPATH": ":".join(dict.fromkeys(paths)),
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        }
        start = time.perf_counter()
        with open(self.log, "w") as err:
            self.process = subprocess.Popen(
                [str(python), "-m", WORKER, json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                start_new_session=True,
            )
        ready = self._read()
        self.load_s = time.perf_counter() - start
        self.identity = ready.get("identity", {})

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARK):
                payload = json.loads(line[len(MARK) :])
                if "error" in payload:
                    raise EngineError(f"retriever {self.spec!r}: vLLM: {payload['error']}")
                return payload
        tail = self.log.read_text().strip().splitlines()[-1:] or ["no output"]
        raise EngineError(
            f"retriever {self.spec!r}: the vLLM pooling worker exited "
            f"({self.process.wait()}): {tail[0]} (log: {self.log})"
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request, return its answer (an error answer raises ``EngineError``)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Ask the worker to exit; kill it when it does not within 30 s."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.process.stdin.close()
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


class VLLMRetriever(Retriever):
    """What both vLLM pooling engines share: options, preflight and the worker's lifetime."""

    Options = VLLMOptions

    def __init__(
        self, spec: str, model: str, options: VLLMOptions, batch_size: int, seed: int = 0
    ) -> None:
        self.spec, self.options, self.batch_size, self.seed = spec, options, batch_size, seed
        self.path, self.model_id = local_model(model, spec)
        self._worker: PoolingWorker | None = None

    def preflight(self) -> None:
        """The vLLM environment exists (else the fix: ``make vllm-env``)."""
        python = vllm_python(self.options.env_path)
        if not python.exists():
            raise EngineError(
                f"retriever {self.spec!r}: the vLLM environment is missing ({python} does not "
                "exist): run `make vllm-env`, or point SABER_VLLM_ENV at a vLLM environment"
            )

    def worker(self) -> PoolingWorker:
        """The pooling worker (started, and the model loaded, on first use)."""
        if self._worker is None:
            self.preflight()
            config = self.options.worker_config(self.path, self.seed)
            self._worker = PoolingWorker(vllm_python(self.options.env_path), config, self.spec)
        return self._worker

    def notes(self) -> dict[str, Any]:
        """Model, engine identity and load time."""
        worker = self._worker
        return {
            "model": self.model_id,
            "engine": worker.identity if worker else {},
            "load_s": round(worker.load_s, 3) if worker else None,
            "batch_size": self.batch_size,
        }

    def close(self) -> None:
        """Stop the worker."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None


class VLLMEmbedRetriever(VLLMRetriever, CachedBiEncoder):
    """``LLM.embed`` behind the embedding cache: score = cos(e_q, e_d)."""

    engine = "vllm-embed"

    def __init__(
        self,
        spec: str,
        model: str,
        options: VLLMOptions,
        batch_size: int,
        cache: EmbeddingCache,
        seed: int = 0,
    ) -> None:
        super().__init__(spec, model, options, batch_size, seed)
        self.kind, self.cache = "single-pass", cache
        self.model_id = f"vllm:{self.model_id}:{options.dtype}"

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> VLLMEmbedRetriever:
        """The entry's model on vLLM."""
        options = parse_options(cls, entry)
        return cls(entry.spec, entry.model, options, entry.batch_size, ctx.cache, ctx.seed)

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = [
            self.worker().ask({"op": "embed", "texts": list(b)})["vectors"]
            for b in batched(texts, self.batch_size)
        ]
        return np.asarray([v for batch in vectors for v in batch], dtype=np.float32)

    def _load(self) -> None:
        self.worker()

    def finish(self) -> dict[str, Any]:
        """Flush new vectors; the model and engine."""
        return {**self.notes(), **super().finish()}


class VLLMScoreRetriever(VLLMRetriever):
    """``LLM.score(query, documents)`` in batches of ``batch_size``."""

    engine = "vllm-score"

    def __init__(
        self, spec: str, model: str, options: VLLMOptions, batch_size: int, seed: int = 0
    ) -> None:
        super().__init__(spec, model, options, batch_size, seed)
        self.kind = "reranker"

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> VLLMScoreRetriever:
        """The entry's cross-encoder on vLLM."""
        return cls(entry.spec, entry.model, parse_options(cls, entry), entry.batch_size, ctx.seed)

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Start the worker and load the model (untimed)."""
        self.worker()

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """One ``LLM.score`` call per batch of candidates."""
        scores: list[float] = []
        for batch in batched(task.documents, self.batch_size):
            request = {
                "op": "score",
                "query": task.query,
                "documents": list(batch),
                "activation": self.options.activation,
            }
            scores += self.worker().ask(request)["scores"]
        return np.asarray(scores, dtype=np.float64), 0.0

    def finish(self) -> dict[str, Any]:
        """The model and engine; whether the activation was on."""
        return {**self.notes(), "activation": self.options.activation}
