"""Summaries and topic annotations taken from the corpus itself (human-written), and the
figures every annotation table reports."""

from __future__ import annotations

import polars as pl

from saber_core.errors import InputError
from saber_core.ontology.tag_cleanup import clean_tags

NO_SUMMARY = "no summary in the corpus row"
NO_TOPICS = "no topics in the corpus row"


def has_value(corpus: pl.DataFrame, column: str) -> pl.Series:
    """Per row: does ``column`` hold something (not null, not blank, not an empty list)?"""
    empty = (
        pl.col(column).list.len() == 0
        if isinstance(corpus.schema[column], pl.List)
        else pl.col(column).str.strip_chars() == ""
    )
    return corpus.select((pl.col(column).is_not_null() & ~empty).fill_null(False))[column]


def require_some(corpus: pl.DataFrame, column: str, setting: str) -> pl.Series:
    """The rows that have ``column`` (:func:`has_value`); an :class:`InputError` naming the
    setting (``summaries`` / ``topics``) that has an LLM write them when no row has it."""
    present = has_value(corpus, column)
    if not present.any():
        raise InputError(
            f"no corpus row has a {column!r} (the stage {setting} takes them from the corpus)",
            count=corpus.height,
            total=corpus.height,
            examples=corpus["doc_id"].head(3),
            fix=f"set `{setting}: llm` (SABER_{setting.upper()}=llm) to write them with an LLM "
            f"backend, or add a {column!r} column to the corpus",
        )
    return present


def corpus_summaries(corpus: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, summary, summary_status, summary_origin``: the corpus' human summaries. A row
    without one keeps a null summary with the status ``NO_SUMMARY`` (it is never a query or a
    summary match); no summary at all is an :class:`InputError`."""
    present = require_some(corpus, "summary", "summaries")
    return corpus.select(
        "doc_id",
        pl.when(present).then(pl.col("summary")).alias("summary"),
        pl.when(present).then(pl.lit("ok")).otherwise(pl.lit(NO_SUMMARY)).alias("summary_status"),
        pl.lit("human").alias("summary_origin"),
    )


def corpus_topics(corpus: pl.DataFrame, nodes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The corpus' topic ids split into ontology nodes and rejections.

    ``nodes``: ``topic_id, ic`` of the ontology. Returns (``doc_id, topic_id, ic,
    topic_origin``, ``doc_id, topic_id, reason``); ids are stripped, duplicates within a document
    kept once, order kept. A row without topics is a rejection with a null ``topic_id`` and the
    reason ``NO_TOPICS``; no topics at all is an :class:`InputError`.
    """
    present = require_some(corpus, "topics", "topics")
    pairs = (
        corpus.filter(present)
        .select("doc_id", pl.col("topics").alias("topic_id"))
        .explode("topic_id")
        .filter(pl.col("topic_id").is_not_null())
        .with_columns(pl.col("topic_id").str.strip_chars())
        .unique(maintain_order=True)
    )
    valid = pairs.join(nodes, on="topic_id", how="inner", maintain_order="left")
    rejected = pairs.join(nodes, on="topic_id", how="anti").with_columns(
        pl.lit("topic id is not an ontology node").alias("reason")
    )
    missing = corpus.filter(~present).select(
        "doc_id", pl.lit(None, dtype=pl.String).alias("topic_id"), pl.lit(NO_TOPICS).alias("reason")
    )
    return valid.with_columns(pl.lit("human").alias("topic_origin")), pl.concat([rejected, missing])


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
        "n_rejected": int(rejected["topic_id"].is_not_null().sum()),
        "origins": dict(origins.rows()),
        "n_docs_without_topics": n_docs - valid["doc_id"].n_unique(),
        "mean_topics_per_doc": float(per_doc.mean()) if per_doc.len() else 0.0,
    }


def raw_tag_lists(corpus: pl.DataFrame, node_paths: dict[str, str] | None = None) -> list:
    """Each row's raw tags as paths: the ``tag_paths`` column when the corpus has any, else
    ``topics``; with ``node_paths`` (a node-file tree) node ids are mapped to their paths and
    unknown ids kept as given (they are rejected later)."""
    column = "tag_paths" if corpus["tag_paths"].is_not_null().any() else "topics"
    if not has_value(corpus, column).any():
        raise InputError(
            "no corpus row has tags: the ontology and the topics of this construction are the "
            "corpus' tag paths",
            count=corpus.height,
            total=corpus.height,
            examples=corpus["doc_id"].head(3),
            fix="give each row `topics` (or `tag_paths`) as tag paths like /Mathematics/Algebra/…,"
            " or build with method: platform, an ontology file (SABER_ONTOLOGY) and "
            "SABER_TOPICS=llm",
        )
    lists = corpus[column].to_list()
    if node_paths is None:
        bad = [t for tags in lists for t in (tags or []) if not str(t).startswith("/")]
        if bad:
            raise InputError(
                f"corpus column {column!r} holds tags that are not paths: the published "
                "construction reads tag paths like /Mathematics/Algebra/…",
                count=len(bad),
                examples=bad,
                unit="tags",
                fix="give them, or set ontology_source: node_file (SABER_ONTOLOGY_SOURCE="
                "node_file) to use an ontology node file whose ids the topics name",
            )
        return lists
    return [[node_paths.get(t, t) for t in tags] if tags else tags for tags in lists]


def tag_annotations(
    doc_ids: list[str], raw: list, nodes: pl.DataFrame, cleanup: str, ancestor_check: bool
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cleaned tag lists as annotation rows ``doc_id, topic_id, position, ic, topic_origin``
    (``cleanup``: ``published`` — :func:`saber_core.ontology.tag_cleanup.clean_tags`, with the
    ``ancestor_check`` fix — or ``dedupe``), and the tags that are not nodes of ``nodes``
    (``topic_id, ic``) as rejections with the reason."""
    rows = []
    for doc, tags in zip(doc_ids, raw, strict=True):
        if not tags:
            continue
        kept = (
            clean_tags(tags, ancestor_check=ancestor_check)
            if cleanup == "published"
            else list(dict.fromkeys(tags))
        )
        rows += [{"doc_id": doc, "topic_id": t, "position": i} for i, t in enumerate(kept)]
    schema = {"doc_id": pl.String, "topic_id": pl.String, "position": pl.Int64}
    pairs = pl.DataFrame(rows, schema=schema)
    valid = pairs.join(nodes, on="topic_id", how="inner", maintain_order="left")
    rejected = pairs.join(nodes, on="topic_id", how="anti").select(
        "doc_id", "topic_id", pl.lit("topic id is not an ontology node").alias("reason")
    )
    return valid.with_columns(pl.lit("human").alias("topic_origin")), rejected


def rejection_error(valid: pl.DataFrame, rejected: pl.DataFrame) -> InputError | None:
    """When more topic annotations were rejected than kept, the error that says why and which
    setting fixes it (counts and three examples); None otherwise. Rows without topics (a null
    ``topic_id``) are not rejected ids and are not counted."""
    ids = rejected.filter(pl.col("topic_id").is_not_null())
    if ids.height == 0 or ids.height <= valid.height:
        return None
    examples = ids["topic_id"].unique(maintain_order=True).head(3).to_list()
    looks_like_paths = all(str(t).startswith("/") for t in examples)
    hint = (
        "they look like tag paths: set ontology_source: tag_paths (SABER_ONTOLOGY_SOURCE="
        "tag_paths), or SABER_METHOD=sabermath for the published construction"
        if looks_like_paths
        else "check that SABER_ONTOLOGY names the ontology these ids come from"
    )
    return InputError(
        "most topic annotations are not ontology nodes",
        count=ids.height,
        total=ids.height + valid.height,
        examples=examples,
        unit="topic annotations",
        fix=hint,
    )
