"""What every retriever engine shares: the reranking task, the ``Retriever`` interface, the
engine context (caches and test doubles) and the checks of an entry's options and device.

An engine scores one task — a query and its candidates — at a time. ``prepare``/``finish`` run
untimed around a setting's tasks, ``preflight`` checks what can be checked before any model loads
(folders, devices, servers, ids), and ``close`` releases what outlives a setting (a model worker
process). ``score`` returns (scores, charged seconds): the charge is work done earlier on the
task's behalf and served from a cache (see ``EmbeddingCache.embed``), added to the measured
latency.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from saber_eval.registry import Kind, RetrieverEntry
from saber_llm.embeddings.cache import EmbeddingCache, Encoder

DEVICES = ("auto", "cpu", "cuda")


class EngineError(ValueError):
    """A retriever that cannot run as configured (the message names the fix)."""


@dataclass(frozen=True)
class Task:
    """One reranking task: a query and its candidates, texts already enveloped."""

    query_id: str
    query: str
    documents: tuple[str, ...]
    jaccard: np.ndarray | None = None
    doc_ids: tuple[str, ...] = ()


@dataclass
class EngineContext:
    """What engines share in one evaluation: the embedding cache, the LLM call-cache file, the
    seed, and test doubles that replace real models (``encoder``, ``cross_encoder``,
    ``backend``); a build grading its pools passes its LLM calls' ``dispatch`` (the local LLM
    server or the run's SLURM allocation) and its ``run_id``."""

    cache: EmbeddingCache
    seed: int = 0
    cache_path: Path | None = None
    llm_store: Any = None
    encoder: Encoder | None = None
    cross_encoder: Any = None
    backend: Any = None
    backend_factory: Callable[[str, str], tuple[Any, dict[str, Any]]] | None = None
    dispatch: Any = None
    run_id: str = "saber-eval"

    def store(self) -> Any:
        """The DuckDB store holding the LLM call cache (on ``cache_path``)."""
        if self.llm_store is None:
            from saber_store.database import DuckDBStore

            self.llm_store = DuckDBStore(database=str(self.cache_path or "eval_cache.duckdb"))
        return self.llm_store


@dataclass(frozen=True)
class NoOptions:
    """An engine without options."""


class Retriever(ABC):
    """Scores a task's candidates; ``prepare``/``finish`` run untimed around the tasks."""

    engine: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    spec: str
    kind: Kind

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> Retriever:
        """The engine of a registry entry (its ``model`` and checked ``options``)."""
        raise NotImplementedError(f"engine {cls.engine!r} has no registry constructor")

    def preflight(self) -> None:  # noqa: B027 - optional hook
        """Checks before any model loads (folders, devices, servers); raise ``EngineError``."""

    def check_tasks(self, tasks: Sequence[Task]) -> None:  # noqa: B027 - optional hook
        """Checks against a setting's tasks before any retriever runs (a run file's ids)."""

    def prepare(self, tasks: Sequence[Task]) -> None:  # noqa: B027 - optional hook
        """Untimed setup before the first task (load a model, preload caches)."""

    @abstractmethod
    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """(one score per candidate, seconds charged for cached work)."""

    def finish(self) -> dict[str, Any]:
        """Untimed teardown (flush caches); returns notes recorded with the run."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what outlives one setting (a model worker process)."""


def parse_options(cls: type[Retriever], entry: RetrieverEntry) -> Any:
    """The entry's ``options`` as the engine's ``Options`` dataclass; an unknown or mistyped
    option is an ``EngineError`` naming the spec, the option and the known ones."""
    fields = {f.name: f for f in dataclasses.fields(cls.Options)}
    unknown = sorted(set(entry.options) - set(fields))
    if unknown:
        raise EngineError(
            f"retriever {entry.spec!r} (engine {cls.engine}): unknown option(s) {unknown}; "
            f"known: {sorted(fields)}"
        )
    values = {}
    for name, value in entry.options.items():
        default = fields[name].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise EngineError(f"retriever {entry.spec!r}: option {name} must be true or false")
        if isinstance(default, int | float) and not isinstance(default, bool):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise EngineError(f"retriever {entry.spec!r}: option {name} must be a number")
        values[name] = value
    return cls.Options(**values)


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (False when torch is missing)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_device(device: str, spec: str) -> str:
    """``auto`` → ``cuda`` when torch sees a CUDA device, else ``cpu``; ``cuda`` on a machine
    without one is an ``EngineError`` naming the fix."""
    if device not in DEVICES and not device.startswith("cuda:"):
        raise EngineError(f"retriever {spec!r}: device must be one of {DEVICES}, not {device!r}")
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device.startswith("cuda") and not cuda_available():
        raise EngineError(
            f"retriever {spec!r}: device {device!r} but torch sees no CUDA device on this "
            "machine: use device: auto (CUDA where there is one) or cpu"
        )
    return device


def torch_dtype(dtype: str, spec: str) -> Any:
    """The torch dtype of ``auto|float32|float16|bfloat16`` (``auto``: the checkpoint's)."""
    if dtype == "auto":
        return "auto"
    import torch

    value = getattr(torch, dtype, None)
    if not isinstance(value, torch.dtype):
        raise EngineError(
            f"retriever {spec!r}: dtype must be auto, float32, float16 or bfloat16, not {dtype!r}"
        )
    return value


def local_model(name: str, spec: str) -> tuple[str, str]:
    """(load path or hub name, cache identity) of a model name: ``minilm`` → the packaged MiniLM;
    an existing path → its absolute path; a name that looks like a path but does not exist is an
    ``EngineError``; anything else is a hub name (loaded from the local Hugging Face cache)."""
    from saber_llm.embeddings.embedder import default_embedder_path, model_identity

    if name in ("", "minilm"):
        return default_embedder_path(), model_identity()
    path = Path(name).expanduser()
    if path.exists():
        return str(path.resolve()), model_identity(str(path))
    if name.startswith(("/", ".", "~")):
        raise EngineError(
            f"retriever {spec!r}: model folder {name} does not exist (give an existing folder or "
            "a Hugging Face id already in the local cache)"
        )
    return name, name


def cosine(vectors: np.ndarray) -> np.ndarray:
    """cos(e_q, e_d) for rows 1.. against row 0: unit-normalised dot products."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    return vectors[1:] @ vectors[0]


def batched(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    """``items`` cut into consecutive batches of at most ``size``."""
    size = max(int(size), 1)
    return [items[i : i + size] for i in range(0, len(items), size)]
