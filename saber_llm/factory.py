"""The LLM backends and the pairwise judges a build plan can name, by name: :data:`BACKENDS`
(``llm.backend``) and :data:`JUDGES` (``tournament.judge``; the schema checks a setting against
its table: :class:`saber_config.schema.Registered`). Each class builds itself from the
plan (``from_plan``); the API key only from the ``SABER_API_KEY`` variable, never a setting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saber_llm.base import LLMBackend
from saber_llm.embedded import EmbeddedBackend
from saber_llm.judges import EmbeddingJudge, LexicalJudge, LLMJudge, PairwiseJudge
from saber_llm.openai_compat import OpenAICompatibleBackend
from saber_llm.vllm_backend import VLLMBackend

if TYPE_CHECKING:
    from saber_config import BuildPlan

BACKENDS: dict[str, type[LLMBackend]] = {
    cls.config_name: cls for cls in (EmbeddedBackend, OpenAICompatibleBackend, VLLMBackend)
}
JUDGES: dict[str, type[PairwiseJudge]] = {
    cls.config_name: cls for cls in (EmbeddingJudge, LexicalJudge, LLMJudge)
}


def make_backend(plan: BuildPlan) -> LLMBackend:
    """The LLM backend named by ``plan.llm.backend`` (the schema checked the name)."""
    return BACKENDS[plan.llm.backend].from_plan(plan)


def make_judge(plan: BuildPlan, backend: LLMBackend | None) -> PairwiseJudge:
    """The pairwise judge named by ``plan.tournament.judge`` (``backend``: the build's)."""
    return JUDGES[plan.tournament.judge].from_plan(plan, backend)
