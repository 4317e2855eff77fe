"""The retriever engines by name, and a retriever made from a spec and its registry entry.

:data:`ENGINES` is the one table of engines (``name → class``); a registry entry names its
engine (``engine:``, else the spec prefix: ``saber_eval.registry.PREFIX_ENGINES``), its model and
its options, which the engine checks. Engines by family:

* lexical (:mod:`saber_eval.engines.lexical`): ``bm25``, ``jaccard``, ``random``;
* bi-encoders (:mod:`~saber_eval.engines.bi_encoders`, :mod:`~saber_eval.engines.vllm_pooling`):
  ``sentence-transformers`` (``st:``), ``vllm-embed`` (``vllm:``), ``openai-embed`` (``openai:``);
* rerankers (:mod:`~saber_eval.engines.cross_encoders`, :mod:`~saber_eval.engines.llm`):
  ``cross-encoder`` (``ce:``), ``vllm-score`` (``vllm-score:``), ``seq-cls`` (``seqcls:``),
  ``llm-pointwise`` (``llm:``), ``llm-yesno`` (``yesno:``);
* late interaction (:mod:`~saber_eval.engines.late_interaction`): ``colbert`` (``colbert:``);
* ``mteb`` (``mteb:``, :mod:`~saber_eval.engines.mteb_zoo`): a model of mteb's zoo by its loader;
* ``run`` (``run:PATH``, :mod:`~saber_eval.engines.run_file`): a TREC run file or an MTEB
  predictions folder, scored with no model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from saber_eval.engines.base import EngineContext, EngineError, Retriever
from saber_eval.engines.bi_encoders import EmbeddingRetriever, OpenAIEmbedRetriever
from saber_eval.engines.cross_encoders import CrossEncoderRetriever, SequenceClassifierRetriever
from saber_eval.engines.late_interaction import ColBERTRetriever
from saber_eval.engines.lexical import BM25Retriever, JaccardRetriever, RandomRetriever
from saber_eval.engines.llm import LLMPointwiseRetriever, LLMYesNoRetriever
from saber_eval.engines.mteb_zoo import MTEBRetriever
from saber_eval.engines.run_file import RunFileRetriever
from saber_eval.engines.vllm_pooling import VLLMEmbedRetriever, VLLMScoreRetriever
from saber_eval.registry import PREFIX_ENGINES, Registry, RetrieverEntry
from saber_llm.embeddings.cache import EmbeddingCache

ENGINES: dict[str, type[Retriever]] = {
    cls.engine: cls
    for cls in (
        BM25Retriever,
        JaccardRetriever,
        RandomRetriever,
        EmbeddingRetriever,
        VLLMEmbedRetriever,
        OpenAIEmbedRetriever,
        CrossEncoderRetriever,
        VLLMScoreRetriever,
        SequenceClassifierRetriever,
        LLMPointwiseRetriever,
        LLMYesNoRetriever,
        ColBERTRetriever,
        MTEBRetriever,
        RunFileRetriever,
    )
}


def engine_class(entry: RetrieverEntry) -> type[Retriever]:
    """The class of an entry's engine; unknown → ``EngineError`` naming the known ones."""
    cls = ENGINES.get(entry.engine)
    if cls is None:
        prefixes = ", ".join(f"{p}:" for p in PREFIX_ENGINES)
        raise EngineError(
            f"retriever {entry.spec!r}: unknown engine {entry.engine or '(none)'!r}; known "
            f"engines: {', '.join(sorted(ENGINES))} (or a spec prefix: bm25, jaccard, random, "
            f"{prefixes})"
        )
    return cls


def make_retriever(
    spec: str,
    *,
    entry: RetrieverEntry | None = None,
    cache: EmbeddingCache | None = None,
    **context: Any,
) -> Retriever:
    """The retriever of a spec and its registry entry (default: the spec's default entry);
    ``context``: the other :class:`EngineContext` fields (seed, the call-cache store, test
    doubles ``backend``/``encoder``/``cross_encoder`` that replace real models, ...)."""
    entry = entry or Registry(entries={}, hash="").get(spec)
    ctx = EngineContext(cache=cache or EmbeddingCache(None), **context)
    return engine_class(entry).from_entry(entry, ctx)


def retriever_factory(
    cache_path: Path | None, seed: int = 0, registry: Registry | None = None, **overrides: Any
) -> Callable[[str], Retriever]:
    """``spec → Retriever`` with the registry's entries, sharing one embedding cache
    (``overrides["cache"]``, else one on ``cache_path``) and the LLM call-cache file."""
    cache = overrides.pop("cache", None) or EmbeddingCache(cache_path)
    entries = registry or Registry(entries={}, hash="")

    def make(spec: str) -> Retriever:
        return make_retriever(
            spec,
            entry=entries.get(spec),
            cache=cache,
            seed=seed,
            cache_path=cache_path,
            **overrides,
        )

    return make
