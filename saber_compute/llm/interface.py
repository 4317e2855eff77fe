"""The one LLM interface (Dagster-free): a batch of chat requests in, one result per request out.

A request carries everything that determines its answer (messages, sampling parameters, seed,
an optional constrained choice set), so its cache key is a hash of exactly that plus the
backend's identity. ``choices`` asks the backend to answer with one of the given strings (vLLM
guided choice, the embedded backend's next-token scoring); when the backend can, it also returns
the log-probability of each choice.

An engine (:class:`LLMEngine`) answers requests in the process that holds the model: the build's
own process, an engine subprocess, or a compute node. The Dagster resources of
``saber_llm`` configure engines and name them by ``module:Class`` plus a config
(:func:`build_engine`), so a compute node builds the same engine without Dagster.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ChatMessage:
    """One chat message."""

    role: str
    content: str


@dataclass(frozen=True)
class LLMRequest:
    """One call: messages, sampling parameters and the prompt it was rendered from."""

    messages: tuple[ChatMessage, ...]
    prompt_id: str
    prompt_hash: str
    input_hash: str
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    choices: tuple[str, ...] | None = None
    logprobs: bool = False

    def sampling(self) -> dict:
        """The sampling parameters (part of the cache key and of provenance)."""
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "choices": list(self.choices) if self.choices else None,
            "logprobs": self.logprobs,
        }


@dataclass(frozen=True)
class LLMResult:
    """One answer: text, optional per-choice log-probabilities, usage, or an error."""

    text: str
    response_id: str = ""
    choice_logprobs: dict[str, float] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)


@runtime_checkable
class LLMEngine(Protocol):
    """A batch LLM engine: the embedded CPU model, vLLM offline, or anything answering requests.

    ``generate`` answers every request (same order; failures are results with ``error`` set),
    ``identity`` gives ``backend`` and ``model`` (and anything else that changes answers), and
    ``load`` loads the model now (an LLM server times its one load)."""

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]: ...

    def identity(self) -> dict[str, str]: ...

    def load(self) -> None: ...


def build_engine(spec: str, config: dict[str, Any]) -> Any:
    """The engine named by ``module:Class``, built with ``config``; it must answer
    ``generate``/``identity``/``load`` (an :class:`LLMEngine`, or a backend resource that
    delegates to one)."""
    module, _, name = spec.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not isinstance(cls, type):
        raise TypeError(f"{spec} is not a class")
    engine = cls(**config)
    if not isinstance(engine, LLMEngine):
        raise TypeError(f"{spec} is not an LLM engine (generate, identity, load)")
    return engine


def call_key(identity: dict[str, str], request: LLMRequest) -> str:
    """Cache key: sha256 over (backend identity, prompt hash, sampling params, input hash).

    The rendered messages are hashed too, so a change in how a prompt is filled never reuses
    an answer to different text.
    """
    payload = {
        "identity": identity,
        "prompt_hash": request.prompt_hash,
        "sampling": request.sampling(),
        "input_hash": request.input_hash,
        "messages": [asdict(m) for m in request.messages],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def parting_choice_logprobs(
    steps: Sequence[tuple[str, Iterable[tuple[str | None, float | None]]]],
    choices: Sequence[str],
) -> dict[str, float]:
    """Each choice's log-probability at the token where the choices part.

    ``steps`` are the generated tokens in order, each as (its text, its top-k candidates as
    (token text, log-prob)). Following the answer's text, the parting step is the first one whose
    generated token leaves a single choice possible: for ``"1"``/``"2"`` the first token, for
    ``"\\boxed{1}"``/``"\\boxed{2}"`` the digit after ``\\boxed{``. There each choice gets the
    log-sum-exp of the candidates that continue the text towards it and no other choice (tokens
    ``"1"`` and ``" 1"`` both count). Text is compared without leading whitespace. A choice seen
    in no candidate is omitted (below the top-k cut-off); no parting step: ``{}``. Under
    constrained decoding (vLLM) the log-probs are over the allowed tokens only, so the choices'
    probabilities at the parting step sum to 1.
    """
    wanted = [c.strip() for c in choices]
    prefix = ""
    for chosen, candidates in steps:
        here = (prefix + chosen).lstrip()
        if len(_reachable(here, wanted)) > 1 or not _reachable(here, wanted):
            prefix += chosen
            continue
        matched: dict[str, list[float]] = {}
        for token, logprob in candidates:
            if token is None or logprob is None or math.isnan(logprob):
                continue
            reach = _reachable((prefix + token).lstrip(), wanted)
            if len(reach) == 1:
                matched.setdefault(choices[reach[0]], []).append(float(logprob))
        return {choice: _logsumexp(values) for choice, values in matched.items()}
    return {}


def _reachable(text: str, choices: Sequence[str]) -> list[int]:
    """Indices of the choices that ``text`` is a prefix of (or that it completes)."""
    return [i for i, c in enumerate(choices) if c.startswith(text) or text.startswith(c)]


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    if math.isinf(top):
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))
