"""Rerankers that read query and document together, in this process on ``device``:

* ``cross-encoder`` — a sentence-transformers ``CrossEncoder``: score = its output on
  (query, document) (the last logit when it has several labels);
* ``seq-cls`` — any ``AutoModelForSequenceClassification`` checkpoint (a Qwen3 reranker head,
  MathPinpoint-Judge-8B): the tokenizer gets the pair as (question, document) — question first,
  document second, no template — and the score is the raw logit of label ``label`` (default the
  last), no activation, so a regression head's value is the score.

Candidates go to the model in batches of ``batch_size`` pairs (vLLM's ``score`` is
:mod:`saber_eval.engines.vllm_pooling`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from saber_eval.engines.base import (
    EngineContext,
    Retriever,
    Task,
    batched,
    local_model,
    parse_options,
    resolve_device,
    torch_dtype,
)
from saber_eval.registry import RetrieverEntry


@dataclass(frozen=True)
class PairOptions:
    """Device (auto = CUDA when present), dtype, max length (0 = the model's), remote code, and
    which label is the score (-1 = the last)."""

    device: str = "auto"
    dtype: str = "auto"
    max_length: int = 0
    trust_remote_code: bool = False
    label: int = -1


class PairRetriever(Retriever):
    """What both in-process pair scorers share."""

    Options = PairOptions

    def __init__(
        self,
        spec: str,
        model: Any = None,
        batch_size: int = 16,
        name: str | None = None,
        options: PairOptions | None = None,
    ) -> None:
        self.spec, self.kind, self.batch_size = spec, "reranker", batch_size
        self.options = options or PairOptions()
        self.path, self.model_id = local_model(
            spec.split(":", 1)[1] if name is None else name, spec
        )
        self._model = model

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> PairRetriever:
        """The entry's model with its options (``ctx.cross_encoder`` replaces it in tests)."""
        options = parse_options(cls, entry)
        return cls(
            entry.spec,
            model=ctx.cross_encoder,
            batch_size=entry.batch_size,
            name=entry.model,
            options=options,
        )

    def preflight(self) -> None:
        """The device exists."""
        if self._model is None:
            resolve_device(self.options.device, self.spec)

    def finish(self) -> dict[str, Any]:
        """The model identity."""
        return {"model": self.model_id, "batch_size": self.batch_size}


class CrossEncoderRetriever(PairRetriever):
    """A sentence-transformers CrossEncoder: score = its output on (query, document)."""

    engine = "cross-encoder"

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Load the model (untimed)."""
        if self._model is None:
            from sentence_transformers import CrossEncoder

            o = self.options
            kwargs = {} if o.dtype == "auto" else {"torch_dtype": torch_dtype(o.dtype, self.spec)}
            self._model = CrossEncoder(
                self.path,
                device=resolve_device(o.device, self.spec),
                trust_remote_code=o.trust_remote_code,
                max_length=o.max_length or None,
                model_kwargs=kwargs or None,
            )

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """One forward pass per (query, document) pair, in batches."""
        pairs = [(task.query, d) for d in task.documents]
        out = np.asarray(
            self._model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False),
            dtype=np.float64,
        )
        return (out[:, self.options.label] if out.ndim == 2 else out), 0.0


class SequenceClassifierRetriever(PairRetriever):
    """``AutoModelForSequenceClassification``: score = logit[label] of (question, document)."""

    engine = "seq-cls"

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Load tokenizer and model (untimed), in eval mode on the resolved device."""
        if self._model is None:
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            o = self.options
            self.device = resolve_device(o.device, self.spec)
            self._tokenizer = AutoTokenizer.from_pretrained(
                self.path, trust_remote_code=o.trust_remote_code
            )
            if self._tokenizer.pad_token is None:  # decoder heads (Qwen3) pad with EOS
                self._tokenizer.pad_token = self._tokenizer.eos_token
            model = AutoModelForSequenceClassification.from_pretrained(
                self.path,
                trust_remote_code=o.trust_remote_code,
                dtype=torch_dtype(o.dtype, self.spec),
            )
            if model.config.pad_token_id is None:
                model.config.pad_token_id = self._tokenizer.pad_token_id
            self._model = model.to(self.device).eval()

    def _logits(self, query: str, documents: Sequence[str]) -> np.ndarray:
        import torch

        o = self.options
        encoded = self._tokenizer(
            [query] * len(documents),
            list(documents),
            padding=True,
            truncation=True,
            max_length=o.max_length or None,
            return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            logits = self._model(**encoded).logits
        return logits[:, o.label].float().cpu().numpy().astype(np.float64)

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """Raw logits of the pairs, in batches of ``batch_size``."""
        parts = [self._logits(task.query, b) for b in batched(task.documents, self.batch_size)]
        return (np.concatenate(parts) if parts else np.zeros(0)), 0.0
