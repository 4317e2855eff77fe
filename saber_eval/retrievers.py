"""Retrievers: score one query's candidates (one reranking task) at a time.

Specs:

* ``bm25`` — Lucene BM25 (bm25s, k1 = 1.5, b = 0.75, English stop words, lower-cased
  ``\\w\\w+`` tokens) *fitted per query on that query's candidates only*;
* ``jaccard`` — the benchmark's own ``jaccard_scores`` (summary Jaccard; setting-independent);
* ``random`` — uniform scores from a generator seeded by (seed, sha256(query_id)), so a query's
  scores do not depend on which other queries are evaluated;
* ``st:<path or name>`` — a sentence-transformers bi-encoder, score = cos(e_q, e_d) of
  unit-normalised embeddings, behind the embedding cache; ``st:minilm`` is the packaged
  offline MiniLM;
* ``ce:<path or name>`` — a sentence-transformers ``CrossEncoder``, score = its output for
  (query, document) (the last logit when it has several labels);
* ``llm:<profile>`` — pointwise LLM scoring with ``prompts/pointwise.md`` through the profile's
  LLM backend and the DuckDB call cache: the answer ``\\boxed{s}``, s an integer 0–10, parsed
  strictly; an unparsable answer scores −1 (below every valid score) and is counted as a drop.
  Profiles whose judge runs in ``choice`` mode (small local models) ask for a constrained choice
  among "0"…"10" (one scored token); ``generate`` profiles get the judge's token budget.

``score`` returns (scores, charged seconds): the charge is work done earlier on the task's
behalf and served from a cache (see ``EmbeddingCache.embed``), added to the measured latency.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from saber_eval.registry import Kind
from saber_resources.embeddings.cache import EmbeddingCache, Encoder

POINTWISE_PROMPT = "pointwise"
BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
BARE = re.compile(r"^\s*(\d{1,2})\s*\.?\s*$")
DROP_SCORE = -1.0
SCORE_CHOICES = tuple(str(i) for i in range(11))


@dataclass(frozen=True)
class Task:
    """One reranking task: a query and its candidates, texts already enveloped."""

    query_id: str
    query: str
    documents: tuple[str, ...]
    jaccard: np.ndarray | None = None


class Retriever(ABC):
    """Scores a task's candidates; ``prepare``/``finish`` run untimed around the tasks."""

    spec: str
    kind: Kind

    def prepare(self, tasks: Sequence[Task]) -> None:  # noqa: B027 - optional hook
        """Untimed setup before the first task (load a model, preload caches)."""

    @abstractmethod
    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """(one score per candidate, seconds charged for cached work)."""

    def finish(self) -> dict[str, Any]:
        """Untimed teardown (flush caches); returns notes recorded with the run."""
        return {}


class BM25Retriever(Retriever):
    """BM25 fitted on the task's candidates only."""

    def __init__(self, spec: str = "bm25", k1: float = 1.5, b: float = 0.75) -> None:
        self.spec, self.kind, self.k1, self.b = spec, "single-pass", k1, b

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Import bm25s (untimed)."""
        import bm25s  # noqa: F401

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """BM25(q, d) = Σ_{t∈q} idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|d|/avgdl))."""
        import bm25s

        corpus = bm25s.tokenize(list(task.documents), stopwords="en", show_progress=False)
        model = bm25s.BM25(k1=self.k1, b=self.b)
        model.index(corpus, show_progress=False)
        tokens = bm25s.tokenize(
            [task.query], stopwords="en", return_ids=False, show_progress=False
        )[0]
        known = [t for t in tokens if t in corpus.vocab and t]
        if not known:
            return np.zeros(len(task.documents)), 0.0
        return np.asarray(model.get_scores(known), dtype=np.float64), 0.0


class JaccardRetriever(Retriever):
    """The benchmark's own summary-Jaccard signal."""

    def __init__(self, spec: str = "jaccard") -> None:
        self.spec, self.kind = spec, "single-pass"

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """The query's ``jaccard_scores`` (NaN → −1)."""
        if task.jaccard is None:
            raise ValueError(f"query {task.query_id}: the benchmark has no jaccard_scores")
        return np.nan_to_num(task.jaccard, nan=-1.0).astype(np.float64), 0.0


class RandomRetriever(Retriever):
    """Uniform random scores, seeded per query."""

    def __init__(self, spec: str = "random", seed: int = 0) -> None:
        self.spec, self.kind, self.seed = spec, "single-pass", seed

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """U(0, 1) per candidate from ``default_rng([seed, sha256(query_id)[:8]])``."""
        entropy = int(hashlib.sha256(task.query_id.encode()).hexdigest()[:8], 16)
        return np.random.default_rng([self.seed, entropy]).random(len(task.documents)), 0.0


def resolve_model(name: str) -> tuple[str, str]:
    """(load path or hub name, cache identity) of an ``st:``/``ce:`` model name.

    ``minilm`` → the packaged MiniLM (identity names the package version); an existing path →
    its absolute path; anything else is passed to sentence-transformers as a hub name.
    """
    from saber_resources.embeddings.embedder import default_embedder_path, model_identity

    if name in ("", "minilm"):
        return default_embedder_path(), model_identity()
    path = Path(name).expanduser()
    if path.exists():
        return str(path.resolve()), model_identity(str(path))
    return name, name


class EmbeddingRetriever(Retriever):
    """A sentence-transformers bi-encoder behind the embedding cache: score = cos(e_q, e_d)."""

    def __init__(
        self,
        spec: str,
        cache: EmbeddingCache,
        encoder: Encoder | None = None,
        batch_size: int = 64,
    ) -> None:
        self.spec, self.kind, self.cache, self.batch_size = spec, "single-pass", cache, batch_size
        self.path, self.model_id = resolve_model(spec.split(":", 1)[1])
        self._encoder = encoder

    def _load(self) -> Encoder:
        if self._encoder is None:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(self.path, device="cpu")
            self._encoder = lambda batch: model.encode(
                batch,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return self._encoder

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._load()(texts)

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Preload the cached vectors of every text; load the model if any text is missing."""
        texts = [t for task in tasks for t in (task.query, *task.documents)]
        self.cache.preload(self.model_id, texts)
        if not all(self.cache.has(self.model_id, t) for t in texts):
            self._load()

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """Cosine of unit vectors: e_d · e_q."""
        vectors, charged = self.cache.embed(
            self.model_id, [task.query, *task.documents], self._encode
        )
        vectors = vectors.astype(np.float64)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1.0)
        return vectors[1:] @ vectors[0], charged

    def finish(self) -> dict[str, Any]:
        """Flush new vectors to the cache file."""
        written = self.cache.flush()
        return {
            "model": self.model_id,
            "cache_written": written,
            "cache_path": str(self.cache.path),
        }


class CrossEncoderRetriever(Retriever):
    """A sentence-transformers CrossEncoder: score = its output on (query, document)."""

    def __init__(self, spec: str, model: Any = None, batch_size: int = 32) -> None:
        self.spec, self.kind, self.batch_size = spec, "reranker", batch_size
        self.path, self.model_id = resolve_model(spec.split(":", 1)[1])
        self._model = model

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Load the model (untimed)."""
        if self._model is None:
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(self.path, device="cpu")

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """One forward pass per (query, document) pair, in batches."""
        pairs = [(task.query, d) for d in task.documents]
        out = np.asarray(
            self._model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False),
            dtype=np.float64,
        )
        return (out[:, -1] if out.ndim == 2 else out), 0.0

    def finish(self) -> dict[str, Any]:
        """The model identity."""
        return {"model": self.model_id}


def parse_pointwise(text: str | None) -> int | None:
    """An integer 0–10 from ``\\boxed{s}`` (every box the same) or a bare integer; else None."""
    if not text or not text.strip():
        return None
    boxed = set(BOXED.findall(text))
    if boxed:
        if len(boxed) != 1:
            return None
        value = boxed.pop()
        return int(value) if value.isdigit() and 0 <= int(value) <= 10 else None
    bare = BARE.match(text)
    return int(bare.group(1)) if bare and int(bare.group(1)) <= 10 else None


@dataclass
class LLMPointwiseRetriever(Retriever):
    """Pointwise 0–10 usefulness scores from an LLM backend, through the DuckDB call cache."""

    spec: str
    backend: Any  # saber_resources.llm.base.LLMBackend
    store: Any  # saber_resources.store.database.DuckDBStore holding the call cache
    max_tokens: int = 16
    choice: bool = False
    seed: int = 0
    run_id: str = "saber-eval"
    kind: Kind = "reranker"
    drops: int = 0
    stats: dict[str, int] = field(default_factory=lambda: {"hits": 0, "calls": 0, "errors": 0})

    def __post_init__(self) -> None:
        from saber_resources.llm.cache import CachedLLM
        from saber_resources.llm.prompts import load_prompt

        self._prompt = load_prompt(POINTWISE_PROMPT)
        self._cached = CachedLLM(backend=self.backend, store=self.store, run_id=self.run_id)

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Reset the per-run drop and call counters."""
        self.drops = 0
        self.stats = dict.fromkeys(self.stats, 0)

    def _requests(self, task: Task) -> list:
        from saber_compute.llm.interface import LLMRequest

        return [
            LLMRequest(
                messages=self._prompt.render(query=task.query, document=doc),
                prompt_id=self._prompt.label,
                prompt_hash=self._prompt.hash,
                input_hash=hashlib.sha256(f"{task.query}\x1f{doc}".encode()).hexdigest()[:16],
                max_tokens=1 if self.choice else self.max_tokens,
                temperature=0.0,
                seed=self.seed,
                choices=SCORE_CHOICES if self.choice else None,
                logprobs=self.choice,
            )
            for doc in task.documents
        ]

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """The parsed 0–10 score per candidate (−1 when unparsable)."""
        results, _, stats = self._cached.generate(self._requests(task))
        for name in self.stats:
            self.stats[name] += getattr(stats, name)
        parsed = [parse_pointwise(None if r.error else r.text) for r in results]
        self.drops += sum(p is None for p in parsed)
        return np.array([DROP_SCORE if p is None else p for p in parsed], dtype=np.float64), 0.0

    def finish(self) -> dict[str, Any]:
        """Backend identity, prompt, drops and call-cache statistics."""
        return {
            "backend": self.backend.identity(),
            "prompt": self._prompt.label,
            "mode": "choice" if self.choice else "generate",
            "drops": self.drops,
            **{f"llm_{k}": v for k, v in self.stats.items()},
        }


def llm_backend_for_profile(profile: str) -> tuple[Any, dict[str, Any]]:
    """(the profile's LLM backend, scorer options): constrained choice for choice-mode
    profiles, else free generation with the judge's token budget."""
    from saber_resources.config import load_build_config
    from saber_resources.factory import make_backend

    plan = load_build_config(profile).plan()
    t = plan.tournament
    options = {"choice": t.judge_mode == "choice", "max_tokens": t.judge_max_tokens}
    return make_backend(plan), options


def make_retriever(
    spec: str,
    *,
    cache: EmbeddingCache | None = None,
    seed: int = 0,
    llm_store: Any = None,
    backend: Any = None,
    encoder: Encoder | None = None,
    cross_encoder: Any = None,
    backend_factory: Callable[[str], tuple[Any, dict[str, Any]]] = llm_backend_for_profile,
) -> Retriever:
    """The retriever of a spec (``backend``/``encoder``/``cross_encoder`` replace real models)."""
    if spec == "bm25":
        return BM25Retriever(spec)
    if spec == "jaccard":
        return JaccardRetriever(spec)
    if spec == "random":
        return RandomRetriever(spec, seed=seed)
    prefix, _, name = spec.partition(":")
    if prefix == "st" and name:
        return EmbeddingRetriever(spec, cache or EmbeddingCache(None), encoder=encoder)
    if prefix == "ce" and name:
        return CrossEncoderRetriever(spec, model=cross_encoder)
    if prefix == "llm" and name:
        if llm_store is None:
            raise ValueError("llm: retrievers need a DuckDBStore for the LLM call cache")
        options: dict[str, Any] = {}
        if backend is None:
            backend, options = backend_factory(name)
        return LLMPointwiseRetriever(
            spec=spec, backend=backend, store=llm_store, seed=seed, **options
        )
    raise ValueError(
        f"unknown retriever spec {spec!r}: use bm25, jaccard, random, st:<model>, ce:<model> "
        "or llm:<profile>"
    )


def retriever_factory(
    cache_path: Path | None, seed: int = 0, **overrides: Any
) -> Callable[[str], Retriever]:
    """``spec → Retriever`` sharing one embedding cache (``overrides["cache"]``, else one on
    ``cache_path``) and LLM call cache file."""
    cache = overrides.pop("cache", None) or EmbeddingCache(cache_path)

    def make(spec: str) -> Retriever:
        llm_store = None
        if spec.startswith("llm:"):
            from saber_resources.store.database import DuckDBStore

            llm_store = overrides.get("llm_store") or DuckDBStore(
                database=str(cache_path or Path("eval_cache.duckdb"))
            )
        kwargs = {k: v for k, v in overrides.items() if k != "llm_store"}
        return make_retriever(spec, cache=cache, seed=seed, llm_store=llm_store, **kwargs)

    return make
