"""``saber eval --benchmark hf:NAME[:REVISION]``: the released SaberMath schema through
``datasets.load_dataset``, offline, from a datasets cache built in the test (``hf_cache.py``).
The tiny benchmark is written in the released schema here, by hand, and must read back as the
same benchmark as its export-format folder, score the same nDCG@10 and fail clearly when a
column, the dataset or the revision is missing."""

import json
import re

import numpy as np
import polars as pl
import pytest
from hf_cache import cache_hub_dataset
from test_eval_data import write_tiny_benchmark

from saber_eval.cli import eval_main
from saber_eval.loading import load_benchmark
from saber_eval.runner import retriever_slug

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def released_tables(bench) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(queries, documents) in the released schema: documents in doc-id order, candidates as
    row positions, domains as a list."""
    doc_ids = sorted(bench.corpus)
    position = {d: i for i, d in enumerate(doc_ids)}
    documents = pl.DataFrame(
        {
            "id": doc_ids,
            "problem": [bench.corpus[d][0] for d in doc_ids],
            "solution": [bench.corpus[d][1] for d in doc_ids],
            "original_index": list(range(len(doc_ids))),
        }
    )
    queries = pl.DataFrame(
        {
            "id": [q.query_id for q in bench.queries],
            "problem": [q.problem for q in bench.queries],
            "solution": [q.solution for q in bench.queries],
            "candidates": [[position[c] for c in q.candidates] for q in bench.queries],
            "relevance_scores": [q.relevance.tolist() for q in bench.queries],
            "domains": [[q.domain] for q in bench.queries],
            "jaccard_scores": [q.jaccard.tolist() for q in bench.queries],
        }
    )
    return queries, documents


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A datasets cache (offline) holding the tiny benchmark twice: as one dataset with the
    configs queries/documents, and as the released pair …-queries + …-documents."""
    import datasets

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    tiny = load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))
    queries, documents = released_tables(tiny)
    scratch = tmp_path / "repos"
    cache_hub_dataset(
        "saber-test/TinyMath", {"queries": queries, "documents": documents}, cache, COMMIT, scratch
    )
    cache_hub_dataset("saber-test/Tiny-queries", {None: queries}, cache, COMMIT, scratch)
    cache_hub_dataset("saber-test/Tiny-documents", {None: documents}, cache, OTHER, scratch)
    return tiny, cache, scratch, queries, documents


def same_benchmark(a, b) -> None:
    assert [q.query_id for q in a.queries] == [q.query_id for q in b.queries]
    for qa, qb in zip(a.queries, b.queries, strict=True):
        assert (qa.problem, qa.solution, qa.domain) == (qb.problem, qb.solution, qb.domain)
        assert qa.candidates == qb.candidates
        np.testing.assert_array_equal(qa.relevance, qb.relevance)
        np.testing.assert_allclose(qa.jaccard, qb.jaccard)
    assert a.corpus == b.corpus


@pytest.mark.parametrize("name", ["saber-test/TinyMath", "saber-test/Tiny-queries"])
def test_hub_dataset_reads_back_as_the_export_folder(hub, name):
    tiny = hub[0]
    bench = load_benchmark(f"hf:{name}")
    same_benchmark(bench, tiny)
    assert str(bench.path) == f"hf:{name}" and re.fullmatch(r"[0-9a-f]{16}", bench.hash)
    assert load_benchmark(f"hf:{name}").hash == bench.hash  # the same cached copy, same hash


def test_eval_on_the_hub_dataset_scores_as_on_the_folder(hub, tmp_path, capsys):
    tiny = hub[0]
    out = tmp_path / "eval"
    common = ["--out", str(out), "--no-mlflow", "--retriever", "bm25", "--bootstrap", "100"]
    assert eval_main(["--benchmark", "hf:saber-test/TinyMath", *common]) == 0
    assert eval_main(["--benchmark", str(tiny.path), *common]) == 0
    printed = capsys.readouterr().out
    assert "benchmark: hf:saber-test/TinyMath (6 queries, hash " in printed
    (hub_dir,) = out.glob("TinyMath-*")
    summaries = [
        json.loads((d / "runs" / retriever_slug("bm25") / "statement-full.json").read_text())
        for d in (hub_dir, out / tiny.label)
    ]
    assert summaries[0]["ndcg@10"] == pytest.approx(summaries[1]["ndcg@10"], abs=1e-12)
    assert summaries[0]["per_domain"] == pytest.approx(summaries[1]["per_domain"])
    assert summaries[0]["benchmark_dir"] == "hf:saber-test/TinyMath"


def test_revision_is_checked_against_the_cached_commit(hub):
    tiny = hub[0]
    same_benchmark(load_benchmark(f"hf:saber-test/TinyMath:{COMMIT}"), tiny)
    with pytest.raises(ValueError) as err:
        load_benchmark(f"hf:saber-test/TinyMath:{OTHER}")
    assert str(err.value) == (
        f"hf:saber-test/TinyMath:{OTHER}: saber-test/TinyMath (config queries, split train): the "
        f"cache holds commit {COMMIT}, not the requested {OTHER} (offline, datasets loads the "
        "cached copy)"
    )


def test_missing_columns_are_named_with_config_and_split(hub):
    _, cache, scratch, queries, documents = hub
    cache_hub_dataset(
        "saber-test/Broken",
        {"queries": queries.drop("relevance_scores", "domains"), "documents": documents},
        cache,
        COMMIT,
        scratch,
    )
    with pytest.raises(ValueError) as err:
        load_benchmark("hf:saber-test/Broken")
    assert str(err.value) == (
        "hf:saber-test/Broken: saber-test/Broken (config queries, split train): the queries "
        "table lacks column(s) relevance_scores, domains (the released schema needs id, "
        "problem, solution, candidates, relevance_scores, domains)"
    )
    cache_hub_dataset("saber-test/NoSolutions-queries", {None: queries}, cache, COMMIT, scratch)
    cache_hub_dataset(
        "saber-test/NoSolutions-documents",
        {None: documents.drop("solution")},
        cache,
        COMMIT,
        scratch,
    )
    expected = "NoSolutions-documents (config default, split train): the documents table lacks "
    with pytest.raises(ValueError, match=re.escape(expected + "column(s) solution (")):
        load_benchmark("hf:saber-test/NoSolutions-queries")


def test_a_released_folder_missing_a_column_names_the_file(hub, tmp_path):
    queries, documents = hub[3], hub[4]
    folder = tmp_path / "released"
    folder.mkdir()
    queries.drop("candidates").write_parquet(folder / "queries.parquet")
    documents.write_parquet(folder / "documents.parquet")
    expected = f"{folder / 'queries.parquet'}: the queries table lacks column(s) candidates ("
    with pytest.raises(ValueError, match=re.escape(expected)):
        load_benchmark(folder)
    queries.write_parquet(folder / "queries.parquet")  # complete again: reads as the folder
    same_benchmark(load_benchmark(folder), hub[0])


def test_a_dataset_missing_offline_is_one_line_naming_it(hub):
    cache = hub[1]
    with pytest.raises(FileNotFoundError) as err:
        load_benchmark("hf:saber-test/Absent")
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        f"hf:saber-test/Absent: saber-test/Absent is not in the Hugging Face datasets cache "
        f"({cache}) and HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) is set, so it is not downloaded; "
        "load it once online or point HF_DATASETS_CACHE / HF_HOME at a cache that holds it "
        "(hf:NAME reads the configs "
        "queries and documents of one dataset; hf:OWNER/X-queries reads the released pair "
        "OWNER/X-queries + OWNER/X-documents)"
    )
    # the released pair names the documents dataset when only the queries are cached
    cache_hub_dataset("saber-test/Half-queries", {None: hub[3]}, cache, COMMIT, hub[2])
    expected = "hf:saber-test/Half-queries: saber-test/Half-documents is not in the Hugging Face "
    with pytest.raises(FileNotFoundError, match="^" + re.escape(expected + "datasets cache")):
        load_benchmark("hf:saber-test/Half-queries")


def test_a_config_the_cache_lacks_is_named(hub):
    _, cache, scratch, queries, _ = hub
    cache_hub_dataset("saber-test/OnlyQueries", {"queries": queries}, cache, COMMIT, scratch)
    with pytest.raises(ValueError) as err:
        load_benchmark("hf:saber-test/OnlyQueries")
    assert str(err.value).startswith(
        "hf:saber-test/OnlyQueries: saber-test/OnlyQueries (config documents, split train): "
    )
    assert "\n" not in str(err.value) and "'queries'" in str(err.value)  # the configs it has


@pytest.mark.parametrize("bad", ["hf:", "hf:a/b/c", "hf:has space"])
def test_malformed_references_are_refused(bad):
    with pytest.raises(ValueError, match=r"use hf:NAME\[:REVISION\] with NAME = owner/dataset"):
        load_benchmark(bad)
