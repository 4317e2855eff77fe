"""Bi-encoders behind the embedding cache, score = cos(e_q, e_d) of unit vectors:
``sentence-transformers`` (a model in this process, on ``device``) and ``openai-embed`` (an
OpenAI-compatible ``/v1/embeddings`` endpoint: vLLM's server or a provider). vLLM offline is
:mod:`saber_eval.engines.vllm_pooling`.

Each task's texts missing from the cache are encoded in batches of ``batch_size``; the cache
records each text's amortised cost, so a task served from it is charged what encoding cost.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from saber_eval.engines.base import (
    EngineContext,
    EngineError,
    Retriever,
    Task,
    batched,
    cosine,
    local_model,
    parse_options,
    resolve_device,
    torch_dtype,
)
from saber_eval.registry import RetrieverEntry
from saber_llm.embeddings.cache import EmbeddingCache, Encoder


class CachedBiEncoder(Retriever):
    """A bi-encoder whose vectors go through the embedding cache (``_encode`` by subclasses)."""

    cache: EmbeddingCache
    model_id: str

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _load(self) -> None:
        """Load the model (subclasses with one)."""

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Preload the cached vectors of every text; load the model if any text is missing."""
        texts = [t for task in tasks for t in (task.query, *task.documents)]
        self.cache.preload(self.model_id, texts)
        if not all(self.cache.has(self.model_id, t) for t in texts):
            self._load()

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """Cosine of unit vectors: e_d · e_q."""
        vectors, charged = self.cache.embed(
            self.model_id, [task.query, *task.documents], self._encode
        )
        return cosine(vectors), charged

    def finish(self) -> dict[str, Any]:
        """Flush new vectors to the cache file."""
        written = self.cache.flush()
        return {
            "model": self.model_id,
            "cache_written": written,
            "cache_path": str(self.cache.path),
        }


@dataclass(frozen=True)
class STOptions:
    """sentence-transformers settings: device (auto = CUDA when present), dtype, max length
    (0 = the model's), remote code, keyword arguments of the underlying model."""

    device: str = "auto"
    dtype: str = "auto"
    max_length: int = 0
    trust_remote_code: bool = False
    model_kwargs: dict[str, Any] = field(default_factory=dict)


class EmbeddingRetriever(CachedBiEncoder):
    """A sentence-transformers bi-encoder (``st:minilm`` is the packaged offline MiniLM)."""

    engine = "sentence-transformers"
    Options = STOptions

    def __init__(
        self,
        spec: str,
        cache: EmbeddingCache,
        encoder: Encoder | None = None,
        batch_size: int = 64,
        model: str | None = None,
        options: STOptions | None = None,
    ) -> None:
        self.spec, self.kind, self.cache, self.batch_size = spec, "single-pass", cache, batch_size
        self.options = options or STOptions()
        name = spec.split(":", 1)[1] if model is None else model
        self.path, self.model_id = local_model(name, spec)
        if self.options.dtype not in ("auto", "float32"):
            self.model_id += f"@{self.options.dtype}"
        self._encoder = encoder

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> EmbeddingRetriever:
        """The entry's model with its options."""
        options = parse_options(cls, entry)
        return cls(
            entry.spec,
            ctx.cache,
            encoder=ctx.encoder,
            batch_size=entry.batch_size,
            model=entry.model,
            options=options,
        )

    def preflight(self) -> None:
        """The device exists."""
        if self._encoder is None:
            resolve_device(self.options.device, self.spec)

    def _load(self) -> None:
        if self._encoder is None:
            from sentence_transformers import SentenceTransformer

            o = self.options
            kwargs = dict(o.model_kwargs)
            if o.dtype != "auto":
                kwargs["torch_dtype"] = torch_dtype(o.dtype, self.spec)
            model = SentenceTransformer(
                self.path,
                device=resolve_device(o.device, self.spec),
                trust_remote_code=o.trust_remote_code,
                model_kwargs=kwargs or None,
            )
            if o.max_length:
                model.max_seq_length = o.max_length
            self._encoder = lambda batch: model.encode(
                batch,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                show_progress_bar=False,
            )

    def _encode(self, texts: list[str]) -> np.ndarray:
        self._load()
        assert self._encoder is not None
        return self._encoder(texts)


@dataclass(frozen=True)
class OpenAIOptions:
    """An OpenAI-compatible embeddings endpoint: base URL (``.../v1``), the environment variable
    holding the API key ('' = none), requests in flight, retries, timeout, ``dimensions``, and
    ``truncate_prompt_tokens`` (vLLM's server: -1 cuts inputs to the model's context, as
    sentence-transformers does; 0 = not sent, a provider may refuse the field)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str = "SABER_API_KEY"
    max_concurrency: int = 4
    max_retries: int = 3
    timeout_s: float = 60.0
    dimensions: int = 0
    truncate_prompt_tokens: int = 0


class OpenAIEmbedRetriever(CachedBiEncoder):
    """``POST {base_url}/embeddings`` with ``{"model", "input": [batch]}``; 429, 5xx and
    connection errors retried with exponential backoff (1, 2, 4 … s); the key only in the
    ``Authorization`` header, never in the cache identity or an error."""

    engine = "openai-embed"
    Options = OpenAIOptions

    def __init__(
        self,
        spec: str,
        model: str,
        options: OpenAIOptions,
        cache: EmbeddingCache,
        batch_size: int = 16,
    ) -> None:
        self.spec, self.kind, self.cache = spec, "single-pass", cache
        self.model, self.options, self.batch_size = model, options, batch_size
        self.model_id = f"openai:{options.base_url.rstrip('/')}:{model}"

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> OpenAIEmbedRetriever:
        """The entry's served model."""
        return cls(entry.spec, entry.model, parse_options(cls, entry), ctx.cache, entry.batch_size)

    def _url(self) -> str:
        return self.options.base_url.rstrip("/") + "/embeddings"

    def preflight(self) -> None:
        """The server answers ``GET {base_url}/models`` (else a line naming the URL)."""
        url = self.options.base_url.rstrip("/") + "/models"
        try:
            with urllib.request.urlopen(self._request(url), timeout=10):
                return
        except urllib.error.HTTPError:
            return  # it answers (a provider may refuse the listing): embeddings will tell
        except (urllib.error.URLError, OSError) as exc:
            raise EngineError(
                f"retriever {self.spec!r}: the embedding server {self.options.base_url} is "
                f"unreachable ({getattr(exc, 'reason', exc)}): start it, or set options.base_url"
            ) from exc

    def _request(self, url: str, body: bytes | None = None) -> urllib.request.Request:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.options.api_key_env, "") if self.options.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return urllib.request.Request(url, data=body, headers=headers)

    def _post(self, texts: Sequence[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.options.dimensions:
            payload["dimensions"] = self.options.dimensions
        if self.options.truncate_prompt_tokens:
            payload["truncate_prompt_tokens"] = self.options.truncate_prompt_tokens
        body = json.dumps(payload).encode()
        for attempt in range(self.options.max_retries + 1):
            try:
                request = self._request(self._url(), body)
                with urllib.request.urlopen(request, timeout=self.options.timeout_s) as response:
                    data = json.loads(response.read())["data"]
                return [row["embedding"] for row in sorted(data, key=lambda r: r["index"])]
            except urllib.error.HTTPError as exc:
                if (exc.code != 429 and exc.code < 500) or attempt == self.options.max_retries:
                    raise EngineError(
                        f"retriever {self.spec!r}: {self._url()} answered HTTP {exc.code}"
                    ) from exc
            except (urllib.error.URLError, OSError) as exc:
                if attempt == self.options.max_retries:
                    raise EngineError(
                        f"retriever {self.spec!r}: {self._url()} unreachable "
                        f"({getattr(exc, 'reason', exc)}) after {attempt + 1} attempts"
                    ) from exc
            time.sleep(2.0**attempt)
        raise AssertionError("unreachable")

    def _encode(self, texts: list[str]) -> np.ndarray:
        batches = batched(texts, self.batch_size)
        with ThreadPoolExecutor(max(1, self.options.max_concurrency)) as pool:
            vectors = list(pool.map(self._post, batches))
        return np.asarray([v for batch in vectors for v in batch], dtype=np.float32)

    def finish(self) -> dict[str, Any]:
        """Flush new vectors; the endpoint and model."""
        return {**super().finish(), "base_url": self.options.base_url, "served_model": self.model}
