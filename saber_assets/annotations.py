"""Stage: solution summaries and topic annotations.

The embedded default is generator-free: summaries are the corpus's human-written ``summary``
column (CHAMP's hints) and topics its human ``topics`` annotations. Topic ids that are not
ontology nodes are rejected into ``topic_rejections`` (never kept), and counted.
"""

import dagster as dg
import polars as pl

from saber_assets.runtime import StageOutput, materialize_stage
from saber_core.text import TOKENIZER_VERSION
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
            f"{missing.height} corpus rows have no {column!r} (first doc_ids: {ids}); {what} "
            "come from the corpus until an LLM backend is configured for this stage"
        )


@dg.asset(group_name="annotation", deps=["corpus"], kinds={"duckdb"})
def summaries(context: dg.AssetExecutionContext, store: DuckDBStore) -> dg.MaterializeResult:
    """One solution summary per document (human-written in the embedded default)."""

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        _require_column(corpus, "summary", "summaries")
        table = corpus.select(
            "doc_id",
            "summary",
            pl.lit("human").alias("summary_origin"),
            pl.lit(TOKENIZER_VERSION).alias("tokenizer_version"),
        )
        words = table["summary"].str.split(" ").list.len()
        return StageOutput(
            {"summaries": table},
            figures={"n_summaries": table.height, "median_words": float(words.median())},
        )

    return materialize_stage(
        context, store, settings={"origin": "corpus"}, upstream=["corpus"], compute=compute
    )


@dg.asset(
    group_name="annotation",
    deps=["corpus", "ontology"],
    kinds={"duckdb"},
)
def topic_annotations(
    context: dg.AssetExecutionContext, store: DuckDBStore
) -> dg.MaterializeResult:
    """(doc_id, topic_id) rows validated against the ontology; unknown ids are rejected."""

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        _require_column(corpus, "topics", "topic annotations")
        nodes = store.read_table("ontology").select(pl.col("node_id").alias("topic_id"), "ic")
        pairs = (
            corpus.select("doc_id", pl.col("topics").alias("topic_id"))
            .explode("topic_id")
            .filter(pl.col("topic_id").is_not_null())
            .with_columns(pl.col("topic_id").str.strip_chars())
            .unique(maintain_order=True)
        )
        valid = pairs.join(nodes, on="topic_id", how="inner", maintain_order="left")
        rejected = pairs.join(nodes, on="topic_id", how="anti").with_columns(
            pl.lit("topic id is not an ontology node").alias("reason")
        )
        with_topics = valid["doc_id"].n_unique()
        per_doc = valid.group_by("doc_id").len()["len"]
        return StageOutput(
            {
                "topic_annotations": valid.with_columns(pl.lit("human").alias("topic_origin")),
                "topic_rejections": rejected,
            },
            figures={
                "n_annotations": valid.height,
                "n_rejected": rejected.height,
                "n_docs_without_topics": corpus.height - with_topics,
                "mean_topics_per_doc": float(per_doc.mean()) if per_doc.len() else 0.0,
            },
        )

    return materialize_stage(
        context,
        store,
        settings={"origin": "corpus"},
        upstream=["corpus", "ontology"],
        compute=compute,
    )
