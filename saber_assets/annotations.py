"""Stage: solution summaries and topic annotations.

``summaries: corpus`` / ``topics: corpus`` (the embedded default, generator-free) take the
corpus's human-written ``summary`` and ``topics`` columns; ``llm`` writes them with the configured
LLM backend (prompts ``summary`` and ``topics``), every call cached and every row carrying its
provenance. Topic ids that are not ontology nodes are rejected into ``topic_rejections`` (never
kept), and counted.
"""

import dagster as dg
import polars as pl

from saber_assets.runtime import StageOutput, fail_on_backend_errors, materialize_stage
from saber_core.text import TOKENIZER_VERSION
from saber_resources.annotators import llm_summaries, llm_topics
from saber_resources.config import BuildConfig
from saber_resources.llm.base import LLMBackend
from saber_resources.llm.cache import CachedLLM
from saber_resources.prompts import load_prompt
from saber_resources.slurm import SlurmDispatch, maybe_dispatcher
from saber_resources.storage import DuckDBStore


def _require_column(corpus: pl.DataFrame, column: str, what: str) -> None:
    empty = (
        pl.col(column).list.len() == 0
        if isinstance(corpus.schema[column], pl.List)
        else pl.col(column).str.strip_chars() == ""
    )
    missing = corpus.filter(pl.col(column).is_null() | empty)
    if missing.height:
        ids = missing["doc_id"].head(10).to_list()
        raise ValueError(
            f"{missing.height} corpus rows have no {column!r} (first doc_ids: {ids}); set "
            f"`{what}: llm` (SABER_{what.upper()}=llm) to write them with an LLM backend"
        )


def _progress(context: dg.AssetExecutionContext, stage: str):
    def report(done: int, total: int) -> None:
        context.log.info(f"{stage}: {done}/{total} LLM calls")

    return report


def _llm_settings(build: BuildConfig, llm: LLMBackend, prompt: str, **extra) -> dict:
    return {
        "identity": llm.identity(),
        "prompt_hash": load_prompt(prompt).hash,
        "seed": build.seed,
        **extra,
    }


def _call_figures(stats) -> dict:
    return {
        "llm_cache_hits": stats.hits,
        "llm_backend_calls": stats.calls,
        "llm_errors": stats.errors,
    }


@dg.asset(group_name="annotation", deps=["corpus"], kinds={"duckdb"})
def summaries(
    context: dg.AssetExecutionContext,
    build: BuildConfig,
    store: DuckDBStore,
    llm: LLMBackend,
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """One solution summary per document (human-written, or LLM-written with provenance)."""

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        if build.summaries == "corpus":
            _require_column(corpus, "summary", "summaries")
            table = corpus.select(
                "doc_id",
                "summary",
                pl.lit("ok").alias("summary_status"),
                pl.lit("human").alias("summary_origin"),
            )
            figures = {}
        else:
            cached = CachedLLM(
                llm,
                store,
                context.run.run_id,
                dispatch=maybe_dispatcher(build, slurm, context, llm),
            )
            table, stats = llm_summaries(
                cached,
                corpus,
                build.summary_max_tokens,
                build.seed,
                _progress(context, "summaries"),
            )
            fail_on_backend_errors("summaries", stats.errors, stats.calls, stats.hits)
            figures = _call_figures(stats)
        table = table.with_columns(pl.lit(TOKENIZER_VERSION).alias("tokenizer_version"))
        words = table["summary"].str.split(" ").list.len()
        status = table.group_by("summary_status").len().sort("len", descending=True)
        return StageOutput(
            {"summaries": table},
            figures={
                "n_summaries": int(table["summary"].is_not_null().sum()),
                "n_dropped": int(table["summary"].is_null().sum()),
                "status": dict(status.head(10).rows()),
                "median_words": float(words.median() or 0),
                **figures,
            },
        )

    settings = (
        {"origin": "corpus"}
        if build.summaries == "corpus"
        else _llm_settings(build, llm, "summary", max_tokens=build.summary_max_tokens)
    )
    return materialize_stage(
        context, store, settings=settings, upstream=["corpus"], compute=compute
    )


@dg.asset(group_name="annotation", deps=["corpus", "ontology"], kinds={"duckdb"})
def topic_annotations(
    context: dg.AssetExecutionContext,
    build: BuildConfig,
    store: DuckDBStore,
    llm: LLMBackend,
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """(doc_id, topic_id) rows validated against the ontology; unknown ids are rejected."""

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        ontology = store.read_table("ontology")
        nodes = ontology.select(pl.col("node_id").alias("topic_id"), "ic")
        figures = {}
        if build.topics == "corpus":
            _require_column(corpus, "topics", "topics")
            pairs = (
                corpus.select("doc_id", pl.col("topics").alias("topic_id"))
                .explode("topic_id")
                .filter(pl.col("topic_id").is_not_null())
                .with_columns(pl.col("topic_id").str.strip_chars())
                .unique(maintain_order=True)
            )
            valid = pairs.join(nodes, on="topic_id", how="inner", maintain_order="left")
            valid = valid.with_columns(pl.lit("human").alias("topic_origin"))
            rejected = pairs.join(nodes, on="topic_id", how="anti").with_columns(
                pl.lit("topic id is not an ontology node").alias("reason")
            )
        else:
            cached = CachedLLM(
                llm,
                store,
                context.run.run_id,
                dispatch=maybe_dispatcher(build, slurm, context, llm),
            )
            valid, rejected, stats = llm_topics(
                cached,
                corpus,
                ontology,
                build.topic_shortlist,
                build.max_topics,
                build.topics_max_tokens,
                build.seed,
                _progress(context, "topics"),
            )
            fail_on_backend_errors("topics", stats.errors, stats.calls, stats.hits)
            valid = valid.join(nodes, on="topic_id", how="inner", maintain_order="left")
            figures = _call_figures(stats)
        per_doc = valid.group_by("doc_id").len()["len"]
        origins = valid.group_by("topic_origin").len().sort("topic_origin")
        return StageOutput(
            {"topic_annotations": valid, "topic_rejections": rejected},
            figures={
                "n_annotations": valid.height,
                "n_rejected": rejected.height,
                "origins": dict(origins.rows()),
                "n_docs_without_topics": corpus.height - valid["doc_id"].n_unique(),
                "mean_topics_per_doc": float(per_doc.mean()) if per_doc.len() else 0.0,
                **figures,
            },
        )

    settings = (
        {"origin": "corpus"}
        if build.topics == "corpus"
        else _llm_settings(
            build,
            llm,
            "topics",
            shortlist=build.topic_shortlist,
            max_topics=build.max_topics,
            max_tokens=build.topics_max_tokens,
        )
    )
    return materialize_stage(
        context, store, settings=settings, upstream=["corpus", "ontology"], compute=compute
    )
