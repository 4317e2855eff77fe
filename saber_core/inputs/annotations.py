"""Summaries and topic annotations taken from the corpus itself (human-written), and the
figures every annotation table reports."""

from __future__ import annotations

import polars as pl

from saber_core.ontology.tag_cleanup import clean_tags


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


def raw_tag_lists(corpus: pl.DataFrame, node_paths: dict[str, str] | None = None) -> list:
    """Each row's raw tags as paths: the ``tag_paths`` column when the corpus has any, else
    ``topics``; with ``node_paths`` (a node-file tree) node ids are mapped to their paths and
    unknown ids kept as given (they are rejected later)."""
    column = "tag_paths" if corpus["tag_paths"].is_not_null().any() else "topics"
    lists = corpus[column].to_list()
    if node_paths is None:
        bad = [t for tags in lists for t in (tags or []) if not str(t).startswith("/")][:3]
        if bad:
            raise ValueError(
                f"corpus column {column!r} holds tags that are not paths (e.g. {bad}): the "
                "published construction reads tag paths like /Mathematics/Algebra/…; give "
                "them, or set ontology_source: node_file (SABER_ONTOLOGY_SOURCE=node_file) to "
                "use an ontology node file whose ids the topics name"
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


def rejection_error(valid: pl.DataFrame, rejected: pl.DataFrame) -> ValueError | None:
    """When more topic annotations were rejected than kept, the error that says why and which
    setting fixes it (counts and three examples); None otherwise."""
    if rejected.height == 0 or rejected.height <= valid.height:
        return None
    examples = rejected["topic_id"].unique(maintain_order=True).head(3).to_list()
    looks_like_paths = all(str(t).startswith("/") for t in examples)
    hint = (
        "they look like tag paths: set ontology_source: tag_paths (SABER_ONTOLOGY_SOURCE="
        "tag_paths), or SABER_METHOD=sabermath for the published construction"
        if looks_like_paths
        else "check that SABER_ONTOLOGY names the ontology these ids come from"
    )
    return ValueError(
        f"{rejected.height} of {rejected.height + valid.height} topic annotations are not "
        f"ontology nodes (e.g. {examples}); {hint}"
    )
