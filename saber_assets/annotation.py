"""Group ``annotation``: solution summaries and topic annotations.

``summaries: corpus`` / ``topics: corpus`` (the embedded default, generator-free) take the
corpus's human-written ``summary`` and ``topics`` columns; ``llm`` writes them with the configured
LLM backend (prompts ``summary`` and ``topics``), every call cached and every row carrying its
provenance. Topic ids that are not ontology nodes are rejected into ``topic_rejections`` (never
kept), and counted.
"""

from collections.abc import Callable

import dagster as dg
import polars as pl

from saber_assets.resources import BuildResource, StoreResource
from saber_config import PlanReads
from saber_core.construction import Construction
from saber_core.inputs.annotations import (
    corpus_summaries,
    corpus_topics,
    raw_tag_lists,
    rejection_error,
    summary_figures,
    tag_annotations,
    topic_figures,
)
from saber_core.ontology.tag_paths import node_tree_paths
from saber_core.signals.jaccard import TOKENIZER_VERSION
from saber_llm.annotators import llm_summaries, llm_topics
from saber_llm.base import LLMBackend
from saber_llm.cache import CachedLLM, CallStats
from saber_llm.prompts import load_prompt, prompt_source
from saber_runtime.errors import fail_on_backend_errors
from saber_runtime.stage import StageOutput, materialize_stage
from saber_slurm import SlurmDispatch, maybe_dispatcher
from saber_store.sources import load_ontology_frame


def llm_prompt(plan: PlanReads, setting: str, prompt_file: str) -> str:
    """The prompt of an annotation stage whose ``annotation.<setting>`` is ``llm`` (it counts by
    its content, wherever its file lies: ``llm_inputs``), else "" (the corpus's own column)."""
    if getattr(plan.annotation, setting) != "llm":
        return ""
    return prompt_source(prompt_file, plan.plan.inputs.prompts_dir)


def _caller(context, plan: PlanReads, store, llm, slurm, stage: str) -> tuple[CachedLLM, Callable]:
    """The stage's cached LLM (its misses on SLURM when the build runs there: where the calls
    run never changes an answer, so execution is not a recorded setting) and its progress log."""
    dispatch = maybe_dispatcher(plan.plan.execution, slurm, context, llm, store)

    def report(done: int, total: int) -> None:
        context.log.info(f"{stage}: {done}/{total} LLM calls")

    return CachedLLM(llm, store, context.run.run_id, dispatch=dispatch), report


def llm_inputs(llm: LLMBackend, prompt_file: str) -> dict:
    """What an LLM stage's answers depend on outside the plan: the backend and the prompt."""
    return {"identity": llm.identity(), "prompt_hash": load_prompt(prompt_file).hash}


def _materialize(context, store, plan: PlanReads, compute, llm: LLMBackend, prompt: str):
    """Materialize the stage; an LLM-written one also depends on the backend and the prompt."""
    extra = llm_inputs(llm, prompt) if prompt else {}
    return materialize_stage(context, store, plan, compute=compute, extra=extra)


def _paid(stage: str, stats: CallStats) -> dict:
    """Fail (retry) on backend errors, else the call figures."""
    fail_on_backend_errors(stage, stats.errors, stats.calls, stats.hits)
    return {
        "llm_cache_hits": stats.hits,
        "llm_backend_calls": stats.calls,
        "llm_errors": stats.errors,
        **stats.prefix_cache(),
    }


@dg.asset(group_name="annotation", deps=["corpus"], kinds={"duckdb"})
def summaries(
    context: dg.AssetExecutionContext,
    build: BuildResource,
    store: StoreResource,
    llm: dg.ResourceParam[LLMBackend],
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """One solution summary per document (human-written, or LLM-written with provenance)."""
    plan = build.reads()
    prompt = llm_prompt(plan, "summaries", "summary")

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        if not prompt:
            table, figures = corpus_summaries(corpus), {}
        else:
            cached, progress = _caller(context, plan, store, llm, slurm, "summaries")
            max_tokens = plan.annotation.summary_max_tokens
            table, stats = llm_summaries(cached, corpus, max_tokens, plan.seed, progress, prompt)
            figures = _paid("summaries", stats)
        table = table.with_columns(pl.lit(TOKENIZER_VERSION).alias("tokenizer_version"))
        return StageOutput({"summaries": table}, figures={**summary_figures(table), **figures})

    return _materialize(context, store, plan, compute, llm, prompt)


def corpus_topic_rows(plan: PlanReads, corpus, nodes, steps: Construction | None = None) -> tuple:
    """The corpus' own topics as annotation rows and rejections: node ids checked against the
    ontology, or — tag-based constructions — cleaned tag paths (``tag_cleanup``); stops with
    the reason and the setting that fixes it when most topics are rejected. ``steps``: another
    construction than the build's (the audit)."""
    steps = steps or plan.construction
    if steps.ontology_source == "tag_paths" or steps.engine == "all_pairs":
        node_paths = None
        if steps.ontology_source == "node_file":
            inputs = plan.inputs
            frame = load_ontology_frame(inputs.ontology, inputs.synth_scale, plan.seed)
            node_paths = node_tree_paths(frame["node_id"].to_list(), frame["parent_ids"].to_list())
        raw = raw_tag_lists(corpus, node_paths)
        ancestor_check = steps.has_fix("ancestor_check")
        ids = corpus["doc_id"].to_list()
        valid, rejected = tag_annotations(ids, raw, nodes, steps.tag_cleanup, ancestor_check)
    else:
        valid, rejected = corpus_topics(corpus, nodes)
    error = rejection_error(valid, rejected)
    if error is not None:
        raise error
    return valid, rejected


@dg.asset(group_name="annotation", deps=["corpus", "ontology"], kinds={"duckdb"})
def topic_annotations(
    context: dg.AssetExecutionContext,
    build: BuildResource,
    store: StoreResource,
    llm: dg.ResourceParam[LLMBackend],
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """(doc_id, topic_id) rows validated against the ontology; unknown ids are rejected."""
    plan = build.reads()
    prompt = llm_prompt(plan, "topics", "topics")

    def compute() -> StageOutput:
        corpus, ontology = store.read_table("corpus"), store.read_table("ontology")
        nodes = ontology.select(pl.col("node_id").alias("topic_id"), "ic")
        if not prompt:
            (valid, rejected), figures = corpus_topic_rows(plan, corpus, nodes), {}
        else:
            cached, progress = _caller(context, plan, store, llm, slurm, "topics")
            a = plan.annotation
            valid, rejected, stats = llm_topics(
                cached,
                corpus,
                ontology,
                a.topic_shortlist,
                a.max_topics,
                a.topics_max_tokens,
                plan.seed,
                progress,
                prompt,
            )
            valid = valid.join(nodes, on="topic_id", how="inner", maintain_order="left")
            figures = _paid("topics", stats)
        return StageOutput(
            {"topic_annotations": valid, "topic_rejections": rejected},
            figures={**topic_figures(valid, rejected, corpus.height), **figures},
        )

    return _materialize(context, store, plan, compute, llm, prompt)
