"""Synthetic paper-shaped input: determinism, schema, and the documented shape constraints."""

from __future__ import annotations

import json
from collections import Counter

import networkx as nx
import numpy as np
import polars as pl
import pytest

from saber_core.inputs.corpus import validate_corpus
from saber_core.inputs.synth import (
    DOMAINS,
    PAPER_DOCS,
    SynthConfig,
    synth_ontology,
    synth_vocabulary,
    synthesize,
    write_synthetic,
)
from saber_core.ontology.dag import build_ontology
from saber_core.signals.jaccard import (
    STOP_WORDS,
    build_token_matrix,
    jaccard_many_vs_many,
    tokenize,
)

SMALL = {"n_nodes": 600, "vocab_size": 3000}
SCALE = 0.003  # 849 documents


@pytest.fixture(scope="module")
def small():
    return synthesize(SCALE, seed=11, **SMALL)


@pytest.fixture(scope="module")
def full_ontology():
    return synth_ontology(seed=4)


def test_same_seed_same_frames_other_seed_differs(small):
    again = synthesize(SCALE, seed=11, **SMALL)
    assert again.ontology.equals(small.ontology)
    assert again.corpus.equals(small.corpus)
    other = synthesize(SCALE, seed=12, **SMALL)
    assert not other.corpus.equals(small.corpus)
    assert not other.ontology.equals(small.ontology)


def test_ontology_does_not_depend_on_scale():
    a = synthesize(0.001, seed=3, **SMALL)
    b = synthesize(0.002, seed=3, **SMALL)
    assert a.ontology.equals(b.ontology)
    assert a.corpus.height == 283 and b.corpus.height == 566


def test_scale_sets_documents_and_queries():
    assert SynthConfig().n_docs == PAPER_DOCS == 283_000
    assert SynthConfig().n_queries == 1_000
    assert SynthConfig(scale=0.1).n_docs == 28_300
    assert SynthConfig(scale=0.1).n_queries == 100
    with pytest.raises(ValueError, match="scale"):
        SynthConfig(scale=0)


def test_corpus_schema_and_validation(small):
    corpus = small.corpus
    assert corpus.columns == [
        "doc_id", "problem", "solution", "source", "domain", "summary", "topics", "tag_paths",
    ]  # fmt: skip
    assert corpus.schema["topics"] == pl.List(pl.String)
    assert corpus.height == round(PAPER_DOCS * SCALE)
    assert corpus["doc_id"].n_unique() == corpus.height
    assert corpus["problem"].n_unique() == corpus.height, "problem texts are distinct"
    assert set(corpus["source"].unique()) == {"synthetic"}
    checked = validate_corpus(corpus)
    assert checked.quarantine.height == 0
    assert checked.corpus.height == corpus.height


def test_topics_three_to_eight_distinct_ontology_nodes(small):
    lists = small.corpus["topics"].to_list()
    nodes = set(small.ontology["node_id"].to_list())
    assert all(3 <= len(t) <= 8 for t in lists)
    assert all(len(set(t)) == len(t) for t in lists)
    assert set().union(*map(set, lists)) <= nodes
    root = small.ontology["node_id"][0]
    assert all(root not in t for t in lists), "the root (IC 0) is never a topic"
    sizes = Counter(len(t) for t in lists)
    assert set(sizes) == set(range(3, 9))


def test_domains_balanced(small):
    counts = Counter(small.corpus["domain"].to_list())
    assert set(counts) == set(DOMAINS)
    assert max(counts.values()) - min(counts.values()) <= 1


def test_full_size_ontology_is_a_dag_with_multi_parent_nodes(full_ontology):
    frame = full_ontology
    assert frame.height == 17_100
    onto = build_ontology(frame)  # validates: unique ids, known parents, no cycle
    assert not onto.virtual_root_added, "a single root"
    n_parents = frame["parent_ids"].list.len()
    share = float((n_parents > 1).mean())
    assert 0.05 <= share <= 0.10
    graph = nx.DiGraph(
        (p, c) for c, ps in zip(frame["node_id"], frame["parent_ids"], strict=True) for p in ps
    )
    assert nx.is_directed_acyclic_graph(graph)
    depth = onto.to_frame()["depth"]
    assert depth.max() == 6
    per_depth = Counter(depth.to_list())
    assert per_depth[1] == 12  # top-level areas, like a subject taxonomy
    assert per_depth[5] > per_depth[4] > per_depth[3] > per_depth[2] > per_depth[1]
    # branching is skewed: some inner nodes have many children, many nodes none
    children = Counter(p for ps in frame["parent_ids"].to_list() for p in ps)
    assert max(children.values()) >= 20
    assert frame.height - len(children) > frame.height // 2


def test_topics_are_zipf_skewed_and_mostly_deep(full_ontology):
    data = synthesize(0.01, seed=4)  # 2,830 documents over the full-size ontology
    assert data.ontology.equals(full_ontology)
    nodes = build_ontology(full_ontology).to_frame()
    depth = dict(zip(nodes["node_id"], nodes["depth"], strict=True))
    flat = data.corpus["topics"].explode().to_list()
    freq = sorted(Counter(flat).values(), reverse=True)
    assert freq[0] >= 20 * np.median(freq), "a heavy head"
    assert np.mean([depth[t] >= 4 for t in flat]) >= 0.8, "mostly deeper nodes"


def test_vocabulary_words_are_single_non_stop_tokens():
    words = synth_vocabulary(2000, seed=0)
    assert len(words) == len(set(words)) == 2000
    assert not set(words) & set(STOP_WORDS)
    for word in words[:200]:
        assert tokenize(word) == frozenset([word])


def test_summaries_have_about_25_words_and_zipf_frequencies(small):
    counts = small.corpus["summary"].str.split(" ").list.len()
    assert counts.min() >= 20 and counts.max() <= 30
    assert 24 <= counts.mean() <= 26
    tokens = build_token_matrix(small.corpus["summary"])
    df = np.asarray(tokens.matrix.sum(axis=0)).ravel()
    top = np.sort(df)[::-1]
    assert top[0] >= 10 * top[100], "Zipf: the most frequent word dominates"


def test_some_problems_are_near_duplicates(small):
    tokens = build_token_matrix(small.corpus["problem"])
    jac = jaccard_many_vs_many(tokens, tokens).tocoo()
    off = jac.row != jac.col
    near = jac.data[off] >= 0.8
    n_pairs = int(near.sum()) // 2
    expected = round(SynthConfig().near_duplicate_share * small.corpus.height)
    assert 1 <= n_pairs <= 2 * expected + 2


def test_write_synthetic_round_trips(tmp_path, small):
    paths = write_synthetic(tmp_path / "syn", SCALE, seed=11, **SMALL)
    assert set(paths) == {"ontology", "corpus", "manifest"}
    assert pl.read_parquet(paths["ontology"]).equals(small.ontology)
    assert pl.read_parquet(paths["corpus"]).equals(small.corpus)
    manifest = json.loads(paths["manifest"].read_text())
    assert manifest["n_docs"] == small.corpus.height
    assert manifest["n_queries"] == SynthConfig(scale=SCALE).n_queries
    assert manifest["config"]["seed"] == 11


def test_tag_paths_are_prefix_closed_paths_of_the_topics(small):
    """A tagger's raw lists: every topic's path along primary parents, each accepted ancestor
    (prefix below the root) listed once; the first level maps to the document's domain."""
    from saber_core.discovery.final_sampler import tag_domains
    from saber_core.inputs.synth import DOMAINS

    parents = dict(small.ontology.select("node_id", "parent_ids").rows())
    published = {"Calculus": "Calculus and Analysis"}
    rows = small.corpus.select("topics", "tag_paths").head(300).iter_rows()
    for topics, tags in rows:
        assert len(set(tags)) == len(tags)
        assert all(t.startswith("/Mathematics/") for t in tags)
        for tag in tags:  # prefix-closed below the root
            parts = tag.split("/")
            assert all("/".join(parts[:k]) in tags for k in range(3, len(parts)))
        deepest = {t for t in tags if not any(u.startswith(t + "/") for u in tags)}
        for topic in topics:  # each topic ends a path whose depth is its primary-parent depth
            depth, node = 0, topic
            while parents[node]:
                node, depth = parents[node][0], depth + 1
            if depth == 1:  # an area: its title is "area <k>"
                continue
            ends = [t for t in tags if t.endswith((f".{int(topic[1:])}", f"-{int(topic[1:])}"))]
            assert len(ends) == 1 and ends[0].count("/") == depth + 2
        ends = {e for e in tags for t in topics if e.endswith((f".{int(t[1:])}", f"-{int(t[1:])}"))}
        assert {t for t in deepest if "/topic " in t} <= ends
        for tag in tags:  # an area's domain key maps to the area's domain (area a: a mod 5)
            parts = tag.split("/")
            if len(parts) > 3:
                area = int(parts[3].removeprefix("area "))
                expected = DOMAINS[area % len(DOMAINS)]
                assert tag_domains([tag]) == (published.get(expected, expected),)
