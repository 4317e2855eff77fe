"""Sentence embeddings: the offline MiniLM model (:mod:`.embedder`) and the embedding cache keyed by
model and exact text (:mod:`.cache`)."""
