"""LLM rerankers through the project's LLM backends (embedded CPU model, vLLM offline through
the local LLM server, an OpenAI-compatible server) and the DuckDB call cache, so an answer is
never paid for twice:

* ``llm-pointwise`` (``llm:<profile>``) — ``prompts/pointwise.md``: the answer ``\\boxed{s}``, s an
  integer 0–10, parsed strictly; an unparsable answer scores −1 (below every valid score) and is
  counted as a drop. Profiles whose judge runs in ``choice`` mode (small local models) ask for a
  constrained choice among "0"…"10" (one scored token); ``generate`` profiles get the judge's
  token budget.
* ``llm-yesno`` (``yesno:<profile>``) — the Qwen3-Reranker format (``prompts/yesno.md``): a
  constrained choice between "yes" and "no" with log-probabilities, and the score is read from
  the next-token probabilities at the answer token::

      score = P(yes) / (P(yes) + P(no)) = σ(log P(yes) − log P(no))

  which is continuous (no ties among a query's candidates, unlike 0–10 integers). A choice below
  the backend's top-k cut-off counts as probability 0; neither choice seen is a drop (−1).

Options: ``llm_backend`` (embedded|vllm|openai: overrides the profile's backend), ``instruction``
(``llm-yesno``). The profile ``build`` (``yesno:build``, ``llm:build``) is the build's own LLM:
as a build's pointwise judge it grades through the build's backend, call cache and execution
(the local LLM server, or the run's SLURM allocation); outside a build it is an error.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from saber_eval.engines.base import EngineContext, Retriever, Task, parse_options
from saber_eval.registry import Kind, RetrieverEntry

POINTWISE_PROMPT = "pointwise"
YESNO_PROMPT = "yesno"
YESNO_CHOICES = ("yes", "no")
DEFAULT_INSTRUCTION = (
    "Given a math problem, retrieve problems whose solutions use the same key idea"
)
BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
BARE = re.compile(r"^\s*(\d{1,2})\s*\.?\s*$")
DROP_SCORE = -1.0
SCORE_CHOICES = tuple(str(i) for i in range(11))
BUILD_PROFILE = "build"


def parse_pointwise(text: str | None) -> int | None:
    """An integer 0–10 from ``\\boxed{s}`` (every box the same) or a bare integer; else None."""
    if not text or not text.strip():
        return None
    boxed = set(BOXED.findall(text))
    if boxed:
        if len(boxed) != 1:
            return None
        value = boxed.pop()
        return int(value) if value.isdigit() and 0 <= int(value) <= 10 else None
    bare = BARE.match(text)
    return int(bare.group(1)) if bare and int(bare.group(1)) <= 10 else None


def yes_probability(logprobs: dict[str, float] | None) -> float | None:
    """σ(log P(yes) − log P(no)); a missing choice has probability 0; None when neither."""
    if not logprobs:
        return None
    yes, no = logprobs.get("yes", -math.inf), logprobs.get("no", -math.inf)
    if math.isinf(yes) and math.isinf(no):
        return None
    if math.isinf(no):
        return 1.0
    if math.isinf(yes):
        return 0.0
    return 1.0 / (1.0 + math.exp(no - yes))


def judge_scorer_options(tournament: Any) -> dict[str, Any]:
    """The scorer options of a build's judge settings: constrained choice for choice mode, else
    free generation with the judge's token budget."""
    return {"choice": tournament.judge_mode == "choice", "max_tokens": tournament.judge_max_tokens}


def llm_backend_for_profile(profile: str, backend: str = "") -> tuple[Any, dict[str, Any]]:
    """(the profile's LLM backend — ``backend`` overrides its kind —, scorer options):
    constrained choice for choice-mode profiles, else free generation with the judge's budget."""
    from saber_config import load_build_config
    from saber_llm.factory import make_backend

    if profile == BUILD_PROFILE:
        raise ValueError(
            f"the profile {BUILD_PROFILE!r} is a build's own LLM: use it as the build's "
            "tournament.pointwise_judge, or name a profile (yesno:local-llm)"
        )
    overrides = {"llm_backend": backend} if backend else {}
    plan = load_build_config(profile, **overrides).plan()
    return make_backend(plan), judge_scorer_options(plan.tournament)


@dataclass(frozen=True)
class LLMOptions:
    """The backend kind ('' = the profile's) and, for yes/no, the instruction."""

    llm_backend: str = ""
    instruction: str = DEFAULT_INSTRUCTION


@dataclass
class LLMPointwiseRetriever(Retriever):
    """Pointwise 0–10 usefulness scores from an LLM backend, through the DuckDB call cache."""

    engine = "llm-pointwise"
    Options = LLMOptions
    prompt_name = POINTWISE_PROMPT

    spec: str
    backend: Any  # saber_llm.base.LLMBackend
    store: Any  # saber_store.database.DuckDBStore holding the call cache
    max_tokens: int = 16
    choice: bool = False
    seed: int = 0
    run_id: str = "saber-eval"
    instruction: str = DEFAULT_INSTRUCTION
    dispatch: Any = None  # where cache misses go (None: the backend in-process)
    kind: Kind = "reranker"
    drops: int = 0
    stats: dict[str, int] = field(default_factory=lambda: {"hits": 0, "calls": 0, "errors": 0})
    _prefetched: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        from saber_llm.cache import CachedLLM
        from saber_llm.prompts import load_prompt

        self._prompt = load_prompt(self.prompt_name)
        self._cached = CachedLLM(
            backend=self.backend, store=self.store, run_id=self.run_id, dispatch=self.dispatch
        )

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> LLMPointwiseRetriever:
        """The backend of the profile the entry names (``ctx.backend`` replaces it in tests)."""
        options: LLMOptions = parse_options(cls, entry)
        backend, scorer = ctx.backend, {}
        if backend is None:
            factory = ctx.backend_factory or llm_backend_for_profile
            backend, scorer = factory(entry.model, options.llm_backend)
        return cls(
            spec=entry.spec,
            backend=backend,
            store=ctx.store(),
            seed=ctx.seed,
            run_id=ctx.run_id,
            instruction=options.instruction,
            dispatch=ctx.dispatch,
            **cls.scorer_options(scorer),
        )

    @staticmethod
    def scorer_options(options: dict[str, Any]) -> dict[str, Any]:
        """What of the profile's judge settings this scorer takes."""
        return options

    def preflight(self) -> None:
        """The backend can answer (its own preflight: environment, model folder, server)."""
        check = getattr(self.backend, "preflight", None)
        if check is not None:
            check()

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Reset the per-run drop and call counters. Given a ``dispatch`` (a build grading its
        pools), every task's requests go out at once — one SLURM job or vLLM batch, not one per
        query — and scoring then reads the call cache."""
        self.drops = 0
        self.stats = dict.fromkeys(self.stats, 0)
        self._prefetched = False
        if self.dispatch is not None and tasks:
            _, _, stats = self._cached.generate([r for t in tasks for r in self._requests(t)])
            self._count(stats)
            self._prefetched = True

    def _count(self, stats: Any) -> None:
        for name in self.stats:
            self.stats[name] += getattr(stats, name)

    def _request(self, task: Task, doc: str, **sampling: Any) -> Any:
        from saber_compute.llm.interface import LLMRequest

        return LLMRequest(
            messages=self._prompt.render(**self._values(task.query, doc)),
            prompt_id=self._prompt.label,
            prompt_hash=self._prompt.hash,
            input_hash=hashlib.sha256(f"{task.query}\x1f{doc}".encode()).hexdigest()[:16],
            temperature=0.0,
            seed=self.seed,
            **sampling,
        )

    def _values(self, query: str, document: str) -> dict[str, str]:
        return {"query": query, "document": document}

    def _requests(self, task: Task) -> list:
        return [
            self._request(
                task,
                doc,
                max_tokens=1 if self.choice else self.max_tokens,
                choices=SCORE_CHOICES if self.choice else None,
                logprobs=self.choice,
            )
            for doc in task.documents
        ]

    def _answer(self, task: Task) -> list:
        results, _, stats = self._cached.generate(self._requests(task))
        if not self._prefetched:
            self._count(stats)
        return results

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """The parsed 0–10 score per candidate (−1 when unparsable)."""
        parsed = [parse_pointwise(None if r.error else r.text) for r in self._answer(task)]
        self.drops += sum(p is None for p in parsed)
        return np.array([DROP_SCORE if p is None else p for p in parsed], dtype=np.float64), 0.0

    def finish(self) -> dict[str, Any]:
        """Backend identity, prompt, drops and call-cache statistics."""
        return {
            "backend": self.backend.identity(),
            "prompt": self._prompt.label,
            "mode": "choice" if self.choice else "generate",
            "drops": self.drops,
            **{f"llm_{k}": v for k, v in self.stats.items()},
        }


@dataclass
class LLMYesNoRetriever(LLMPointwiseRetriever):
    """P(yes) / (P(yes) + P(no)) of the Qwen3-Reranker prompt, one scored token per pair."""

    engine = "llm-yesno"
    prompt_name = YESNO_PROMPT

    @staticmethod
    def scorer_options(options: dict[str, Any]) -> dict[str, Any]:
        """Always a constrained yes/no choice (the judge's mode does not apply)."""
        return {}

    def _values(self, query: str, document: str) -> dict[str, str]:
        return {"instruction": self.instruction, "query": query, "document": document}

    def _requests(self, task: Task) -> list:
        return [
            self._request(task, doc, max_tokens=1, choices=YESNO_CHOICES, logprobs=True)
            for doc in task.documents
        ]

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """P(yes) per candidate (−1 when the backend gave neither choice's log-probability)."""
        probs = [
            None if r.error else yes_probability(r.choice_logprobs) for r in self._answer(task)
        ]
        self.drops += sum(p is None for p in probs)
        return np.array([DROP_SCORE if p is None else p for p in probs], dtype=np.float64), 0.0

    def finish(self) -> dict[str, Any]:
        """As pointwise, with the instruction."""
        return {**super().finish(), "mode": "yes/no", "instruction": self.instruction}
