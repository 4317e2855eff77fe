"""Engines without a model: BM25 fitted per query, the benchmark's own Jaccard signal, and
seeded random scores."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from saber_eval.engines.base import EngineContext, Retriever, Task
from saber_eval.registry import RetrieverEntry


class BM25Retriever(Retriever):
    """Lucene BM25 (bm25s, k1 = 1.5, b = 0.75, English stop words, lower-cased ``\\w\\w+``
    tokens) fitted on the task's candidates only."""

    engine = "bm25"

    def __init__(self, spec: str = "bm25", k1: float = 1.5, b: float = 0.75) -> None:
        self.spec, self.kind, self.k1, self.b = spec, "single-pass", k1, b

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> BM25Retriever:
        """BM25 with the default parameters."""
        return cls(entry.spec)

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
    """The benchmark's own summary-Jaccard signal (setting-independent)."""

    engine = "jaccard"

    def __init__(self, spec: str = "jaccard") -> None:
        self.spec, self.kind = spec, "single-pass"

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> JaccardRetriever:
        """The Jaccard signal."""
        return cls(entry.spec)

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """The query's ``jaccard_scores`` (NaN → −1)."""
        if task.jaccard is None:
            raise ValueError(f"query {task.query_id}: the benchmark has no jaccard_scores")
        return np.nan_to_num(task.jaccard, nan=-1.0).astype(np.float64), 0.0


class RandomRetriever(Retriever):
    """Uniform random scores, seeded per query so a query's scores do not depend on which other
    queries are evaluated."""

    engine = "random"

    def __init__(self, spec: str = "random", seed: int = 0) -> None:
        self.spec, self.kind, self.seed = spec, "single-pass", seed

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> RandomRetriever:
        """Random scores seeded by the evaluation's seed."""
        return cls(entry.spec, seed=ctx.seed)

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """U(0, 1) per candidate from ``default_rng([seed, sha256(query_id)[:8]])``."""
        entropy = int(hashlib.sha256(task.query_id.encode()).hexdigest()[:8], 16)
        return np.random.default_rng([self.seed, entropy]).random(len(task.documents)), 0.0
