"""LLMs and the judges built on them: the backend resources behind one interface (:mod:`.base`,
:mod:`.embedded`, :mod:`.openai_compat`, :mod:`.vllm_backend`), the versioned prompts
(:mod:`.prompts`), the DuckDB call cache in front of every backend (:mod:`.cache`), the
summary and topic annotators (:mod:`.annotators`), sentence embeddings (:mod:`.embeddings`),
the pairwise judges (:mod:`.judges`) and the name → class tables that build them
(:mod:`.factory`)."""
