"""The one LLM interface (Dagster-free): a batch of chat requests in, one result per request out.

A request carries everything that determines its answer (messages, sampling parameters, seed,
an optional constrained choice set), so its cache key is a hash of exactly that plus the
backend's identity. ``choices`` asks the backend to answer with one of the given strings (vLLM
guided choice, the embedded backend's next-token scoring); when the backend can, it also returns
the log-probability of each choice.

An engine (:class:`LLMEngine`) answers requests in the process that holds the model: the build's
own process, an engine subprocess, or a compute node. The Dagster resources of
``saber_resources.llm`` configure engines and name them by ``module:Class`` plus a config
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


def match_choice_logprobs(
    candidates: Iterable[tuple[str | None, float]], choices: Sequence[str]
) -> dict[str, float]:
    """Each choice's log-probability as the first generated token, from its top-k candidates.

    ``candidates`` are (token text, log-prob) pairs without duplicates. A token matches a choice
    when both are equal after stripping whitespace; several matching tokens (``"1"`` and ``" 1"``)
    are combined by log-sum-exp. A choice that matches no candidate is omitted (its probability
    is below the top-k cut-off), so the result can be empty. Only the first token is looked at:
    choices should differ in their first token (``"1"``/``"2"``, ``"A"``/``"B"``).
    """
    wanted = {c.strip(): c for c in choices}
    matched: dict[str, list[float]] = {}
    for token, logprob in candidates:
        if token is None or logprob is None:
            continue
        choice = wanted.get(token.strip())
        if choice is not None:
            matched.setdefault(choice, []).append(float(logprob))
    return {choice: _logsumexp(values) for choice, values in matched.items()}


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    if math.isinf(top):
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))
