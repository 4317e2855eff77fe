"""Adding documents to a built corpus (docs/scale.md, "Adding documents"): the rebuild pays for
what is new and its tables equal a from-scratch build of the grown corpus.

* ``method: sabermath`` on a tag-path corpus: with ``ic: corpus_frequency`` (the published IC,
  counted over every document's tags) the all-pairs pass must run in full, and says why; with
  ``ic: seco`` (the tag tree's shape only) the old pairs keep their values and the pass adds
  only the new pairs to the stored totals. Either way the tables equal a fresh build's.
* ``method: platform`` (per-query engine, node-file ontology) with the LLM stages on a scripted
  backend and the growth-stable query draw (``query_draw: stable``): the ontology is reused,
  only the new documents are summarized and annotated (no call for an old row), old queries
  leave only for new documents, and the tables equal a fresh build's."""

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from fakes import CALLS, ScriptedBackend
from test_llm_stage import LLM_PROFILE, reused
from test_sabermath_build import SETTINGS, tag_corpus

from saber_cli.build import run_build
from saber_config import load_build_config
from saber_store.database import DuckDBStore

pytestmark = pytest.mark.e2e  # three whole builds per test (about 1.5 min each): CI's tier
OLD, NEW = 240, 6
LINEAGE = {"_run_id", "_asset_key", "_config_hash", "_code_version", "_created_at"}
# Tables that describe a run rather than its results: when and by which run a call or an asset
# was made (the manifests hold fingerprints and data versions, which hash the input files' paths
# and the run columns), and the band the all-pairs pass counted in (a grown databank's pass
# keeps the band of the pass it adds to; a fresh pass samples its own; the counts are exact
# under either).
RUN_TABLES = {"_saber_manifest", "build_manifest", "llm_calls", "pair_bands"}
RUN_COLUMNS = {"run_id", "response_id", "created_at", "seconds"}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def result_tables(store: DuckDBStore, folder: Path) -> dict[str, pl.DataFrame]:
    """Every table of a build but :data:`RUN_TABLES`, without run columns, paths made relative
    to the build's folder (its corpus file and SABER home)."""
    names = store.query(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
    )["table_name"].to_list()
    out = {}
    for name in sorted(set(names) - RUN_TABLES):
        frame = store.read_table(name)
        frame = frame.drop([c for c in frame.columns if c in LINEAGE | RUN_COLUMNS])
        out[name] = frame.with_columns(
            pl.col(pl.String).str.replace_all(str(folder), "<folder>", literal=True)
        )
    return out


def assert_equal_tables(grown: DuckDBStore, fresh: DuckDBStore, folders: tuple[Path, Path]):
    mine, theirs = result_tables(grown, folders[0]), result_tables(fresh, folders[1])
    assert mine.keys() == theirs.keys()
    differ = []
    for name, frame in mine.items():
        other = theirs[name]
        if frame.columns != other.columns or not frame.sort(frame.columns).equals(
            other.sort(other.columns)
        ):
            differ.append(name)
    assert not differ, differ
    return mine


def pass_figures(store: DuckDBStore) -> dict:
    return store.manifest_entry("pair_histograms")["metadata"]["figures"]


@pytest.mark.parametrize(
    ("ic", "mode"), [("corpus_frequency", "full"), ("seco", "incremental")]
)  # fmt: skip
def test_sabermath_growth_equals_a_fresh_build(tmp_path, ic, mode):
    rows = tag_corpus(OLD + NEW)
    grown_dir, fresh_dir = tmp_path / "grown", tmp_path / "fresh"
    corpus = write_jsonl(grown_dir / "corpus.jsonl", rows[:OLD])
    settings = {**SETTINGS, "ic": ic}
    build = load_build_config("tiny", home=str(grown_dir / "home"), corpus=str(corpus), **settings)
    assert run_build(build, dg.DagsterInstance.ephemeral()).success
    store = DuckDBStore(database=str(build.database_path))
    assert pass_figures(store)["growth"] == {"mode": "full", "reason": "no earlier pass"}
    old_rows = pass_figures(store)["databank_rows"]

    write_jsonl(corpus, rows)  # the same file, six documents appended
    result = run_build(build, dg.DagsterInstance.ephemeral())
    assert result.success
    growth = pass_figures(store)["growth"]
    assert growth["mode"] == mode, growth
    if mode == "full":
        assert f"{old_rows} of the {old_rows} rows of the last pass differ now" in growth["reason"]
        assert "ic: corpus_frequency counts every document's tags" in growth["reason"]
    else:
        assert growth["base_rows"] == old_rows and growth["new_rows"] == NEW
        figures = pass_figures(store)["pass"]
        assert figures["sample"]["rows"] == 0  # the old band, no sample
        assert figures["unordered_pairs"] == old_rows * NEW + NEW * (NEW + 1) // 2

    fresh_corpus = write_jsonl(fresh_dir / "corpus.jsonl", rows)
    fresh = load_build_config(
        "tiny", home=str(fresh_dir / "home"), corpus=str(fresh_corpus), **settings
    )
    assert run_build(fresh, dg.DagsterInstance.ephemeral()).success
    fresh_store = DuckDBStore(database=str(fresh.database_path))
    assert pass_figures(fresh_store)["thresholds"] == pass_figures(store)["thresholds"]
    assert_equal_tables(store, fresh_store, (grown_dir, fresh_dir))


def test_platform_growth_annotates_only_the_new_documents_and_equals_a_fresh_build(tmp_path):
    from saber_store.sources import champ_corpus

    rows = champ_corpus().head(44)
    settings = {**LLM_PROFILE, "corpus_limit": 0, "query_draw": "stable"}
    grown_dir, fresh_dir = tmp_path / "grown", tmp_path / "fresh"
    grown_dir.mkdir()
    corpus = grown_dir / "corpus.jsonl"
    rows.head(40).write_ndjson(corpus)
    build = load_build_config("tiny", home=str(grown_dir / "home"), corpus=str(corpus), **settings)
    CALLS.clear()
    assert run_build(build, dg.DagsterInstance.ephemeral(), ScriptedBackend()).success
    assert CALLS["summary"] == 40 and CALLS["topics"] == 40
    store = DuckDBStore(database=str(build.database_path))
    before = set(store.read_table("queries")["query_id"])

    rows.write_ndjson(corpus)  # four documents appended
    CALLS.clear()
    result = run_build(build, dg.DagsterInstance.ephemeral(), ScriptedBackend())
    assert result.success
    assert CALLS["summary"] == 4 and CALLS["topics"] == 4  # no call for an old row
    flags = reused(result)
    assert flags["ontology"] is True  # the node file's DAG does not depend on the corpus
    assert not flags["corpus"] and not flags["summaries"] and not flags["topic_annotations"]
    # the stable draw: an old query leaves only for a new document that hashes ahead of it
    after = set(store.read_table("queries")["query_id"])
    appended = set(rows.tail(4)["doc_id"])
    assert after - before <= appended and len(before - after) <= len(after - before)

    fresh_dir.mkdir()
    rows.write_ndjson(fresh_dir / "corpus.jsonl")
    fresh = load_build_config(
        "tiny", home=str(fresh_dir / "home"), corpus=str(fresh_dir / "corpus.jsonl"), **settings
    )
    assert run_build(fresh, dg.DagsterInstance.ephemeral(), ScriptedBackend()).success
    fresh_store = DuckDBStore(database=str(fresh.database_path))
    assert_equal_tables(store, fresh_store, (grown_dir, fresh_dir))
