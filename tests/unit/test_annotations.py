"""Human summaries and topics taken from the corpus: validated, rejected, counted."""

import polars as pl
import pytest

from saber_core.inputs.annotations import (
    corpus_summaries,
    corpus_topics,
    summary_figures,
    topic_figures,
)

NODES = pl.DataFrame({"topic_id": ["A", "B", "C"], "ic": [0.1, 0.5, 0.9]})


def test_topics_split_into_nodes_and_rejections_in_order():
    corpus = pl.DataFrame(
        {"doc_id": ["d1", "d2"], "topics": [[" B", "X", "B", "A"], ["C", None, "Y"]]},
        schema_overrides={"topics": pl.List(pl.String)},
    )
    valid, rejected = corpus_topics(corpus, NODES)
    assert valid.select("doc_id", "topic_id", "ic").rows() == [
        ("d1", "B", 0.5),
        ("d1", "A", 0.1),
        ("d2", "C", 0.9),
    ]
    assert set(valid["topic_origin"]) == {"human"}
    assert rejected.select("doc_id", "topic_id").rows() == [("d1", "X"), ("d2", "Y")]
    assert set(rejected["reason"]) == {"topic id is not an ontology node"}
    figures = topic_figures(valid, rejected, n_docs=3)
    assert figures["n_rejected"] == 2 and figures["n_docs_without_topics"] == 1
    assert figures["mean_topics_per_doc"] == pytest.approx(1.5)


def test_missing_annotations_name_the_rows_and_the_setting():
    corpus = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "summary": ["Use parity.", " ", None]})
    with pytest.raises(
        ValueError, match=r"2 corpus rows have no 'summary'.*\['d2', 'd3'\].*SABER_SUMMARIES=llm"
    ):
        corpus_summaries(corpus)
    ok = corpus_summaries(corpus.head(1))
    assert ok.row(0) == ("d1", "Use parity.", "ok", "human")
    assert summary_figures(ok)["median_words"] == 2.0
