"""Summaries and topic annotations taken from the corpus itself (human-written), and the
figures every annotation table reports."""

from __future__ import annotations

import polars as pl


def require_column(corpus: pl.DataFrame, column: str, setting: str) -> None:
    """ValueError naming the rows without ``column`` (null, blank or an empty list) and the
    setting (``summaries`` / ``topics``) that would have an LLM write them."""
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
            f"`{setting}: llm` (SABER_{setting.upper()}=llm) to write them with an LLM backend"
        )


def corpus_summaries(corpus: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, summary, summary_status, summary_origin``: the corpus' human summaries."""
    require_column(corpus, "summary", "summaries")
    return corpus.select(
        "doc_id",
        "summary",
        pl.lit("ok").alias("summary_status"),
        pl.lit("human").alias("summary_origin"),
    )


def corpus_topics(corpus: pl.DataFrame, nodes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The corpus' topic ids split into ontology nodes and rejections.

    ``nodes``: ``topic_id, ic`` of the ontology. Returns (``doc_id, topic_id, ic,
    topic_origin``, ``doc_id, topic_id, reason``); ids are stripped, duplicates within a document
    kept once, order kept.
    """
    require_column(corpus, "topics", "topics")
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
    return valid.with_columns(pl.lit("human").alias("topic_origin")), rejected


def summary_figures(table: pl.DataFrame) -> dict:
    """Counts, status breakdown and median length of a summaries table."""
    words = table["summary"].str.split(" ").list.len()
    status = table.group_by("summary_status").len().sort("len", descending=True)
    return {
        "n_summaries": int(table["summary"].is_not_null().sum()),
        "n_dropped": int(table["summary"].is_null().sum()),
        "status": dict(status.head(10).rows()),
        "median_words": float(words.median() or 0),
    }


def topic_figures(valid: pl.DataFrame, rejected: pl.DataFrame, n_docs: int) -> dict:
    """Counts, origins and topics per document of a topic annotation."""
    per_doc = valid.group_by("doc_id").len()["len"]
    origins = valid.group_by("topic_origin").len().sort("topic_origin")
    return {
        "n_annotations": valid.height,
        "n_rejected": rejected.height,
        "origins": dict(origins.rows()),
        "n_docs_without_topics": n_docs - valid["doc_id"].n_unique(),
        "mean_topics_per_doc": float(per_doc.mean()) if per_doc.len() else 0.0,
    }
