"""The LLM backend and the pairwise judge a build plan names (the API key only through
``dg.EnvVar``, read when the resource is used, never here)."""

from __future__ import annotations

import os

import dagster as dg

from saber_compute.llm.embedded import STOP_STRINGS, packaged_model_folder
from saber_resources.config import BuildPlan
from saber_resources.judges import EmbeddingJudge, LexicalJudge, LLMJudge, PairwiseJudge
from saber_resources.llm.base import LLMBackend
from saber_resources.llm.embedded import EmbeddedBackend
from saber_resources.llm.openai_compat import OpenAICompatibleBackend
from saber_resources.llm.prompts import prompt_source
from saber_resources.llm.vllm_backend import VLLMBackend

API_KEY_ENV = "SABER_API_KEY"


def make_backend(plan: BuildPlan) -> LLMBackend:
    """The LLM backend named by ``plan.llm``."""
    llm = plan.llm
    if llm.backend == "embedded":
        return EmbeddedBackend()
    if llm.backend == "openai":
        key = dg.EnvVar(API_KEY_ENV) if os.environ.get(API_KEY_ENV) else ""
        return OpenAICompatibleBackend(
            base_url=llm.base_url,
            model=llm.model,
            api_key=key,
            max_concurrency=llm.max_concurrency,
            reasoning_effort=llm.reasoning_effort,
        )
    if not llm.model:  # the packaged Gemma 3 270M on this machine's CPU
        return VLLMBackend(
            model=str(packaged_model_folder()),
            max_model_len=llm.max_model_len or 2048,
            enforce_eager=True,
            block_size=32,
            stop=list(STOP_STRINGS),
            chat_template="plain",  # a base model: the embedded engine's plain-text prompts
            seed=plan.seed,
            home=str(plan.paths.home),
        )
    return VLLMBackend(
        model=llm.model,
        tensor_parallel_size=llm.tensor_parallel,
        reasoning_effort=llm.reasoning_effort,
        max_model_len=llm.max_model_len or None,
        seed=plan.seed,
        home=str(plan.paths.home),
    )


def make_judge(plan: BuildPlan, backend: LLMBackend) -> PairwiseJudge:
    """The pairwise judge named by ``plan.tournament``."""
    t = plan.tournament
    if t.judge == "embedding":
        return EmbeddingJudge(cache_path=str(plan.paths.embedding_cache))
    if t.judge == "lexical":
        return LexicalJudge()
    return LLMJudge(
        backend=backend,
        prompt=prompt_source("judge", plan.inputs.prompts_dir),
        mode=t.judge_mode,
        both_orders=t.presentation == "both_orders",
        max_tokens=t.judge_max_tokens,
        seed=plan.seed,
    )
