"""The judge's and annotator's embedder: a text's vector depends on the text only, never on the
texts encoded with it (a resumed or multiprocess build encodes other subsets), and the evaluation's
batched vectors of the same model are never served in its place."""

import numpy as np
from sentence_transformers import SentenceTransformer

from saber_llm.embeddings import embedder
from saber_llm.embeddings.cache import EmbeddingCache
from saber_llm.embeddings.embedder import (
    cache_identity,
    default_embedder_path,
    embed_texts,
    model_identity,
)

TEXTS = [
    "Find all integers x with x^2 = 1 modulo 8.",
    "Prove that the sum of the first n odd numbers is n^2, by induction on n, and then "
    "give a second proof that arranges the odd numbers as the gnomons of a square grid.",
    "Let f be continuous on [0, 1] with f(0) = f(1). Show some chord of length 1/2 is horizontal.",
    "How many subsets of {1, ..., 10} contain no two consecutive integers?",
]


def _fresh() -> None:
    embedder._EMBEDDINGS.clear()


def test_a_vector_is_the_same_whatever_it_was_encoded_with():
    _fresh()
    together = embed_texts(TEXTS)
    _fresh()
    alone = np.concatenate([embed_texts([t]) for t in TEXTS])
    _fresh()
    reversed_ = embed_texts(TEXTS[::-1])[::-1]
    assert np.array_equal(together, alone)  # bitwise: no tolerance
    assert np.array_equal(together, reversed_)
    # the reference: sentence-transformers itself, one text per call, unit vectors
    model = SentenceTransformer(default_embedder_path(), device="cpu")
    reference = np.concatenate([model.encode([t], normalize_embeddings=True) for t in TEXTS])
    assert np.array_equal(together, reference)
    # whereas one padded batch differs in the last bits for some text (why the rule exists)
    batched = model.encode(TEXTS, batch_size=len(TEXTS), normalize_embeddings=True)
    np.testing.assert_allclose(batched, reference, atol=1e-6)


def test_the_cache_keeps_these_vectors_apart_from_batched_ones(tmp_path):
    _fresh()
    path = tmp_path / "embeddings.duckdb"
    embed_texts(TEXTS[:2], cache_path=str(path))
    cache = EmbeddingCache(path)
    assert cache.stored_count(cache_identity()) == 2
    assert cache.stored_count(model_identity()) == 0  # the evaluation's key is not written
    assert cache_identity() != model_identity()
    # a second process (fresh memory) reads them back, bit for bit
    first = embed_texts(TEXTS[:2])
    _fresh()
    assert np.array_equal(embed_texts(TEXTS[:2], cache_path=str(path)), first)
    assert cache.stored_count(cache_identity()) == 2  # nothing encoded again
