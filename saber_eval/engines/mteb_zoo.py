"""A model of the ``mteb`` package's zoo by its own loader (``mteb.get_model``), score =
cos(e_q, e_d) (or e_q · e_d for a model whose mteb meta says ``dot``).

Texts are encoded as mteb's evaluation encodes them: ``encode(DataLoader, task_metadata=<the
SABER-Math reranking task>, hf_split="test", hf_subset="default", prompt_type=query|document)``,
so the model's own query/document prompts apply. Vectors go through the embedding cache keyed by
``mteb:<name>:<revision>:<query|document>`` and the exact text; the model loads only when a text
is missing. The release date of mteb's model meta is recorded in the notes (``release_date``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from saber_eval.benchmark import MAIN_SETTING
from saber_eval.engines.base import (
    EngineContext,
    EngineError,
    Retriever,
    Task,
    cosine,
    parse_options,
    resolve_device,
)
from saber_eval.mteb_metadata import SPLIT, TASK_NAME, task_metadata
from saber_eval.registry import RetrieverEntry
from saber_llm.embeddings.cache import EmbeddingCache

SIMILARITIES = ("cosine", "dot")


@cache
def saber_task_metadata() -> Any:
    """The ``TaskMetadata`` of the SABER-Math reranking task (what the encoders' prompts key
    on)."""
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(**task_metadata("engine", TASK_NAME, MAIN_SETTING))


@dataclass(frozen=True)
class MTEBOptions:
    """mteb zoo settings: device (auto = CUDA when present), revision ('' = mteb's), keyword
    arguments of the model's mteb loader (e.g. ``cache_folder``)."""

    device: str = "auto"
    revision: str = ""
    loader_kwargs: dict[str, Any] = field(default_factory=dict)


class MTEBRetriever(Retriever):
    """An mteb zoo model: its prompts, its similarity, our embedding cache."""

    engine = "mteb"
    Options = MTEBOptions

    def __init__(self, spec: str, name: str, options: MTEBOptions, cache: EmbeddingCache,
                 batch_size: int = 16) -> None:  # fmt: skip
        self.spec, self.kind, self.name = spec, "single-pass", name
        self.options, self.cache, self.batch_size = options, cache, batch_size
        self._meta: Any = None
        self._model: Any = None

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> MTEBRetriever:
        """The entry's zoo model with its options."""
        return cls(entry.spec, entry.model, parse_options(cls, entry), ctx.cache, entry.batch_size)

    def meta(self) -> Any:
        """mteb's ``ModelMeta`` of the model (an unknown name is an ``EngineError``)."""
        if self._meta is None:
            import mteb

            try:
                self._meta = mteb.get_model_meta(self.name)
            except (KeyError, ValueError) as exc:
                raise EngineError(
                    f"retriever {self.spec!r}: mteb knows no model {self.name!r} ({exc})"
                ) from exc
        return self._meta

    @property
    def revision(self) -> str:
        """The revision loaded: the option, else mteb's meta."""
        return self.options.revision or str(self.meta().revision)

    @property
    def model_id(self) -> str:
        """``mteb:<name>:<revision>`` (the cache identity, before the prompt type)."""
        return f"mteb:{self.name}:{self.revision}"

    def similarity(self) -> str:
        """The meta's similarity (``cosine`` when unset)."""
        value = self.meta().similarity_fn_name
        return str(getattr(value, "value", value) or "cosine")

    def metadata(self) -> dict[str, Any]:
        """What mteb's meta says of the model: ``{"release_date": "YYYY-MM-DD" | None}``."""
        return {"release_date": self.meta().release_date}

    def preflight(self) -> None:
        """mteb knows the model, its similarity is supported, the device exists."""
        if self.similarity() not in SIMILARITIES:
            raise EngineError(
                f"retriever {self.spec!r}: mteb model {self.name} scores with "
                f"{self.similarity()!r}; this engine supports {SIMILARITIES} (late interaction: "
                "colbert:)"
            )
        resolve_device(self.options.device, self.spec)

    def _keys(self) -> tuple[str, str]:
        return f"{self.model_id}:query", f"{self.model_id}:document"

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Preload the cached vectors; load the model if any text is missing."""
        query_key, document_key = self._keys()
        queries = [t.query for t in tasks]
        documents = [d for t in tasks for d in t.documents]
        self.cache.preload(query_key, queries)
        self.cache.preload(document_key, documents)
        if not all(self.cache.has(query_key, t) for t in queries) or not all(
            self.cache.has(document_key, t) for t in documents
        ):
            self._load()

    def _load(self) -> None:
        if self._model is not None:
            return
        import mteb

        try:
            self._model = mteb.get_model(
                self.name,
                revision=self.revision,
                device=resolve_device(self.options.device, self.spec),
                **self.options.loader_kwargs,
            )
        except OSError as exc:
            offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
            hint = "HF_HUB_OFFLINE is set: put the weights in the local Hugging Face cache"
            raise EngineError(
                f"retriever {self.spec!r}: mteb could not load {self.name} at revision "
                f"{self.revision} ({hint if offline else exc})"
            ) from exc

    def _encoder(self, is_query: bool) -> Any:
        from mteb._create_dataloaders import _create_dataloader_from_texts
        from mteb.types import PromptType

        prompt_type = PromptType.query if is_query else PromptType.document

        def encode(texts: list[str]) -> np.ndarray:
            self._load()
            vectors = self._model.encode(
                _create_dataloader_from_texts(texts, batch_size=self.batch_size),
                task_metadata=saber_task_metadata(),
                hf_split=SPLIT,
                hf_subset="default",
                prompt_type=prompt_type,
                batch_size=self.batch_size,
                show_progress_bar=False,
            )
            return np.asarray(vectors, dtype=np.float32)

        return encode

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """cos(e_q, e_d), or e_q · e_d for a ``dot`` model."""
        query_key, document_key = self._keys()
        query, query_charge = self.cache.embed(query_key, [task.query], self._encoder(True))
        documents, document_charge = self.cache.embed(
            document_key, list(task.documents), self._encoder(False)
        )
        if self.similarity() == "dot":
            values = np.asarray(documents, dtype=np.float64) @ np.asarray(query[0], np.float64)
        else:
            values = cosine(np.vstack([query, documents]))
        return values, query_charge + document_charge

    def finish(self) -> dict[str, Any]:
        """Flush new vectors; the model, its revision, similarity and release date."""
        return {
            "model": self.model_id,
            "similarity": self.similarity(),
            **self.metadata(),
            "cache_written": self.cache.flush(),
        }
