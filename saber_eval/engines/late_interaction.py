"""Late interaction: ColBERT MaxSim through ``pylate``, score = Σ_i max_j q_i · d_j over the
query's token embeddings q_i and the document's d_j (pylate's ``encode(..., is_query=...)``:
query/document prefix tokens, query expansion, skiplist; pylate's ``colbert_scores``).

Each document is scored against the query on its own: pylate pads a batch of documents with
zero vectors, which would floor a negative max at 0. Token embeddings are not in the project's
vector cache; each distinct (text, is_query) is encoded once per process and a task served from
that dict is charged what encoding its texts cost (the batch time split evenly), as the
embedding cache charges.

pylate 1.6.0 is written for sentence-transformers 5.3; :class:`PylateColBERT` adapts its loading
to sentence-transformers 6 (which loads modules through ``_load_modules``): keep only the
Transformer and Dense modules of a folder, load pylate's own Dense (ignoring the module
input/output names sentence-transformers 6 adds to its config), read pylate's settings
(prefixes, lengths, expansion, skiplist) from ``config_sentence_transformers.json``, and map the
two helpers pylate calls that sentence-transformers 6 renamed (``_model_config``,
``_text_length``).
"""

from __future__ import annotations

import inspect
import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from saber_eval.engines.base import (
    EngineContext,
    EngineError,
    Retriever,
    Task,
    local_model,
    parse_options,
    resolve_device,
)
from saber_eval.registry import RetrieverEntry

PYLATE_SETTINGS = (
    "query_prefix",
    "document_prefix",
    "query_length",
    "document_length",
    "attend_to_expansion_tokens",
    "skiplist_words",
    "do_query_expansion",
)


@cache
def pylate_colbert_class() -> type:
    """pylate's ``ColBERT`` with its loading adapted to sentence-transformers 6 (module doc)."""
    import torch
    from pylate import models
    from safetensors.torch import load_model
    from sentence_transformers.sentence_transformer.modules import Dense, Transformer
    from sentence_transformers.util import import_from_string

    dense_keys = set(inspect.signature(models.Dense.__init__).parameters) - {"self"}

    class PylateDense(models.Dense):
        """pylate's projection loaded from a folder sentence-transformers 6 wrote."""

        @staticmethod
        def load(input_path: str) -> models.Dense:
            config = json.loads((Path(input_path) / "config.json").read_text())
            config = {k: v for k, v in config.items() if k in dense_keys}
            config["activation_function"] = import_from_string(config["activation_function"])()
            layer = models.Dense(**config)
            weights = Path(input_path) / "model.safetensors"
            if weights.exists():
                load_model(layer, str(weights))
            else:
                state = torch.load(Path(input_path) / "pytorch_model.bin", map_location="cpu")
                layer.load_state_dict(state)
            return layer

    class PylateColBERT(models.ColBERT):
        """pylate's ColBERT loadable by sentence-transformers 6."""

        model_type = "ColBERT"
        _module_classes: ClassVar = {"pylate.models.Dense.Dense": PylateDense}

        @property
        def _model_config(self) -> dict[str, Any]:
            return self._get_model_config()

        def _text_length(self, text: Any) -> int:
            return self._input_length(text)

        def _load_modules(self, model_name_or_path: str, *args: Any, **kwargs: Any) -> Any:
            modules, module_kwargs = super()._load_modules(model_name_or_path, *args, **kwargs)
            items = modules.items() if isinstance(modules, dict) else enumerate(modules)
            kept = OrderedDict((str(k), m) for k, m in items if isinstance(m, Transformer | Dense))
            return kept, {k: v for k, v in (module_kwargs or {}).items() if k in kept}

        def _parse_model_config(self, model_config: dict[str, Any]) -> None:
            super()._parse_model_config(model_config)
            for key in PYLATE_SETTINGS:
                if key in model_config and getattr(self, key, None) is None:
                    setattr(self, key, model_config[key])

    return PylateColBERT


def load_colbert(path: str, device: str = "cpu", **kwargs: Any) -> Any:
    """A pylate ColBERT from a folder or a hub name in the local cache (a base encoder gets
    pylate's new projection layer)."""
    return pylate_colbert_class()(model_name_or_path=path, device=device, **kwargs)


@dataclass(frozen=True)
class ColBERTOptions:
    """pylate ColBERT settings: device (auto = CUDA when present), query and document token
    lengths (0 = the model's, else pylate's 32 and 180), remote code."""

    device: str = "auto"
    query_length: int = 0
    document_length: int = 0
    trust_remote_code: bool = False


class ColBERTRetriever(Retriever):
    """ColBERT MaxSim: score(q, d) = Σ_i max_j q_i · d_j (pylate's ``colbert_scores``)."""

    engine = "colbert"
    Options = ColBERTOptions

    def __init__(self, spec: str, model: str, options: ColBERTOptions,
                 batch_size: int = 16) -> None:  # fmt: skip
        self.spec, self.kind, self.options = spec, "single-pass", options
        self.batch_size = batch_size
        self.path, self.model_id = local_model(model, spec)
        self._model: Any = None
        self._tokens: dict[tuple[bool, str], np.ndarray] = {}
        self._cost: dict[tuple[bool, str], float] = {}
        self._encoded = 0

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> ColBERTRetriever:
        """The entry's model with its options."""
        return cls(entry.spec, entry.model, parse_options(cls, entry), entry.batch_size)

    def preflight(self) -> None:
        """pylate imports and the device exists."""
        try:
            import pylate  # noqa: F401
        except ImportError as exc:
            raise EngineError(
                f"retriever {self.spec!r}: pylate is not installed (make setup installs it)"
            ) from exc
        resolve_device(self.options.device, self.spec)

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Load the model (untimed)."""
        if self._model is None:
            o = self.options
            kwargs: dict[str, Any] = {"trust_remote_code": o.trust_remote_code}
            if o.query_length:
                kwargs["query_length"] = o.query_length
            if o.document_length:
                kwargs["document_length"] = o.document_length
            self._model = load_colbert(
                self.path, device=resolve_device(o.device, self.spec), **kwargs
            )

    def _embed(self, texts: Sequence[str], is_query: bool) -> tuple[list[np.ndarray], float]:
        """Token embeddings of ``texts`` (encoding the ones not seen yet) and the recorded
        cost of those served from the dict."""
        keys = [(is_query, t) for t in texts]
        charged = sum(self._cost[k] for k in set(keys) if k in self._tokens)
        missing = list(dict.fromkeys(k for k in keys if k not in self._tokens))
        if missing:
            self.prepare(())
            start = time.perf_counter()
            vectors = self._model.encode(
                [t for _, t in missing], is_query=is_query, batch_size=self.batch_size,
                show_progress_bar=False,
            )  # fmt: skip
            each = (time.perf_counter() - start) / len(missing)
            for key, value in zip(missing, vectors, strict=True):
                self._tokens[key] = np.asarray(value, dtype=np.float32)
                self._cost[key] = each
            self._encoded += len(missing)
        return [self._tokens[k] for k in keys], charged

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """Σ_i max_j q_i · d_j for each candidate d."""
        from pylate.scores import colbert_scores

        (query,), query_charge = self._embed([task.query], is_query=True)
        documents, document_charge = self._embed(task.documents, is_query=False)
        values = [float(colbert_scores(query[None], doc[None])[0, 0]) for doc in documents]
        return np.asarray(values, dtype=np.float64), query_charge + document_charge

    def finish(self) -> dict[str, Any]:
        """The model, its token lengths and how many texts were encoded."""
        model = self._model
        return {
            "model": self.model_id,
            "query_length": getattr(model, "query_length", None),
            "document_length": getattr(model, "document_length", None),
            "texts_encoded": self._encoded,
        }
