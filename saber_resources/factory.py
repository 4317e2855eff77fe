"""The LLM backends and the pairwise judges a build plan can name, by name: :data:`BACKENDS`
(``llm.backend``) and :data:`JUDGES` (``tournament.judge``). Each class builds itself from the
plan (``from_plan``); the API key only through ``dg.EnvVar``, read when the resource is used."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from saber_resources.judges import EmbeddingJudge, LexicalJudge, LLMJudge, PairwiseJudge
from saber_resources.llm.base import LLMBackend
from saber_resources.llm.embedded import EmbeddedBackend
from saber_resources.llm.openai_compat import OpenAICompatibleBackend
from saber_resources.llm.vllm_backend import VLLMBackend

if TYPE_CHECKING:
    from saber_resources.config import BuildPlan

T = TypeVar("T")

BACKENDS: dict[str, type[LLMBackend]] = {
    cls.config_name: cls for cls in (EmbeddedBackend, OpenAICompatibleBackend, VLLMBackend)
}
JUDGES: dict[str, type[PairwiseJudge]] = {
    cls.config_name: cls for cls in (EmbeddingJudge, LexicalJudge, LLMJudge)
}


def make_backend(plan: BuildPlan) -> LLMBackend:
    """The LLM backend named by ``plan.llm.backend``."""
    return _lookup(BACKENDS, plan.llm.backend, "llm.backend").from_plan(plan)


def make_judge(plan: BuildPlan, backend: LLMBackend | None) -> PairwiseJudge:
    """The pairwise judge named by ``plan.tournament.judge`` (``backend``: the build's)."""
    return _lookup(JUDGES, plan.tournament.judge, "tournament.judge").from_plan(plan, backend)


def _lookup(table: dict[str, T], name: str, setting: str) -> T:
    """``table[name]``; an unknown name is a ``ValueError`` naming the known ones."""
    if name not in table:
        raise ValueError(f"{setting}: unknown name {name!r}; known: {', '.join(sorted(table))}")
    return table[name]
