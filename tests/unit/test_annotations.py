"""Human summaries and topics taken from the corpus: validated, rejected, counted."""

import polars as pl
import pytest

from saber_core.errors import InputError
from saber_core.inputs.annotations import (
    NO_SUMMARY,
    NO_TOPICS,
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


def test_rows_without_a_summary_are_kept_out_with_their_status():
    corpus = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "summary": ["Use parity.", " ", None]})
    table = corpus_summaries(corpus)
    assert table.rows() == [
        ("d1", "Use parity.", "ok", "human"),
        ("d2", None, NO_SUMMARY, "human"),
        ("d3", None, NO_SUMMARY, "human"),
    ]
    figures = summary_figures(table)
    assert (figures["n_summaries"], figures["n_dropped"]) == (1, 2)
    assert figures["median_words"] == 2.0


def test_no_summary_at_all_names_the_rows_and_the_setting():
    corpus = pl.DataFrame({"doc_id": ["d1", "d2", "d3", "d4"], "summary": [" ", None, "", None]})
    with pytest.raises(InputError, match=r"no corpus row has a 'summary'") as caught:
        corpus_summaries(corpus)
    error = caught.value
    assert (error.count, error.total, error.examples) == (4, 4, ["d1", "d2", "d3"])
    assert "SABER_SUMMARIES=llm" in error.fix


def test_rows_without_topics_are_rejections_without_a_topic_id():
    corpus = pl.DataFrame(
        {"doc_id": ["d1", "d2", "d3"], "topics": [["A", "X"], [], None]},
        schema_overrides={"topics": pl.List(pl.String)},
    )
    valid, rejected = corpus_topics(corpus, NODES)
    assert valid.select("doc_id", "topic_id").rows() == [("d1", "A")]
    assert rejected.rows() == [
        ("d1", "X", "topic id is not an ontology node"),
        ("d2", None, NO_TOPICS),
        ("d3", None, NO_TOPICS),
    ]
    figures = topic_figures(valid, rejected, n_docs=3)
    assert (figures["n_rejected"], figures["n_docs_without_topics"]) == (1, 2)
    with pytest.raises(InputError, match=r"no corpus row has a 'topics'.*SABER_TOPICS=llm"):
        corpus_topics(corpus.tail(2), NODES)
