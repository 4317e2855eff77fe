"""`method: sabermath` through the asset graph on a user corpus (JSONL: tag-path topics, ideas,
domain lists, no ontology file): the ontology comes from the tags, and the queries and pools
equal a plain-Python run of the published construction (tests/unit/sabermath/
sabermath_reference.py, written from docs/sabermath.md); the released schema reads back with
`datasets`; errors that say why and which setting fixes it."""

import json
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest

from saber_cli.build import run_build
from saber_config import load_build_config
from saber_store.database import DuckDBStore

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "sabermath"))
import sabermath_reference as ref

SIZES = 2  # per group
QUANTILE = 0.9
QUOTAS = {"Algebra": 3, "Geometry": 2, "Number Theory": 2, "Algebra|Geometry": 1}
TITLES = {
    "Algebra": ["Groups", "Groups-Finite", "Rings", "Polynomials"],
    "Geometry": ["Triangles", "Circles", "Circles-Inscribed"],
    "NumberTheory": ["Primes", "Divisors", "Congruences"],
}
WORDS = (
    "parity induction invariant pigeonhole symmetry bound extremal coloring modular "
    "telescoping substitution the of and a find show"
).split()
SETTINGS = dict(
    method="sabermath",
    n_topic_only=SIZES,
    n_summary_only=SIZES,
    n_both=SIZES,
    threshold_quantile=QUANTILE,
    rounds=3,
    domain_quotas=QUOTAS,
    audit_queries=3,
    validity_rr_queries=1,
    recipe_summaries="none",
)


def tag_corpus(n: int, seed: int = 0) -> list[dict]:
    """Rows with raw tag lists (every accepted ancestor listed), ideas and domain lists."""
    rng = np.random.default_rng(seed)
    leaves = [
        f"/Mathematics/{area}/{t}" + (f"/{s}" if k % 2 else "")
        for area, titles in TITLES.items()
        for k, t in enumerate(titles)
        for s in ("Basic", "Advanced")
    ]
    rows = []
    for i in range(n):
        picks = rng.choice(len(leaves), size=rng.integers(1, 4), replace=False)
        raw = []
        for leaf in (leaves[p] for p in picks):
            parts = leaf.split("/")
            raw += ["/".join(parts[:k]) for k in range(3, len(parts) + 1)]
        raw = list(dict.fromkeys(raw))
        idea = " ".join(rng.choice(WORDS, size=rng.integers(3, 7)))
        domains = sorted({ref.DOMAINS[t.split("/")[2]] for t in raw})
        rows.append(
            {
                "doc_id": f"d{i:04d}",
                "problem": f"Problem {i}: {idea}?",
                "solution": f"Solution {i}.",
                "summary": idea,
                "topics": raw,
                "domains": domains,
            }
        )
    return rows


def published_reference(rows: list[dict], seed: int) -> tuple[list[str], dict[str, list[str]]]:
    """Queries (in final-sampler order) and their pools, by the plain-Python reference."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    stop = set(ENGLISH_STOP_WORDS) | set(ref.MATH_WORDS)
    nodes, total = ref.frequency_tree([r["topics"] for r in rows])
    matrix = ref.lin_matrix(nodes, total)
    bank = [r for r in rows if ref.clean_published(r["topics"]) and r["summary"].strip()]
    lists = [[nodes[t][0] for t in ref.clean_published(r["topics"])] for r in bank]
    toks = [ref.tokens(r["summary"], stop) for r in bank]
    n = len(bank)
    bma = np.array([[ref.bma(matrix, lists[i], lists[j]) for j in range(n)] for i in range(n)])
    jac = np.array([[ref.jaccard(toks[i], toks[j]) for j in range(n)] for i in range(n)])
    bma16, jac16 = bma.astype(np.float16), jac.astype(np.float16)
    t_b = ref.threshold_closed_form(bma16.ravel(), QUANTILE)
    t_j = ref.threshold_closed_form(jac16.ravel(), QUANTILE)
    _, targets, pools = ref.select(range(n), bma16, jac16, t_b, t_j, SIZES, seed)
    quotas = [(tuple(sorted(k.split("|"))), v) for k, v in QUOTAS.items()]
    chosen = ref.final_sample([bank[t]["domains"] for t in targets], quotas, seed)
    ids = [bank[targets[c]]["doc_id"] for c in chosen]
    return ids, {bank[targets[c]]["doc_id"]: [bank[j]["doc_id"] for j in pools[c]] for c in chosen}


@pytest.fixture(scope="module")
def sabermath_build(tmp_path_factory):
    home = tmp_path_factory.mktemp("sabermath")
    rows = tag_corpus(240)
    corpus = home / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    build = load_build_config("tiny", home=str(home / "home"), corpus=str(corpus), **SETTINGS)
    result = run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
    return build, DuckDBStore(database=str(build.database_path)), result, rows


def test_queries_and_pools_equal_the_published_construction(sabermath_build):
    build, store, result, rows = sabermath_build
    assert result.success
    ontology = store.read_table("ontology")
    assert (
        ontology["node_id"][0] == "/Mathematics" and ontology["node_id"].str.starts_with("/").all()
    )
    queries, pools = published_reference(rows, build.seed)
    assert store.read_table("queries").sort("query_index")["query_id"].to_list() == queries
    got = store.read_table("candidate_pools").sort("query_id", "position")
    for q in queries:
        assert got.filter(pl.col("query_id") == q)["doc_id"].to_list() == pools[q]
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]


def test_the_audit_covers_every_fix_and_the_report_lists_it(sabermath_build):
    build, store, _, _ = sabermath_build
    audit = store.read_table("sabermath_audit")
    assert audit["fix"].to_list() == [
        "control (no fix)",
        "ancestor_check",
        "root_self_similarity",
        "empty_idea_jaccard",
        "sit_outs",
        "presentation",
        "bt_exact",
    ]
    # the control replays the build exactly: same pools, same pairs (all from the call cache),
    # same ratings — the fixes' numbers measure the fixes, not the replay
    control = audit.row(0, named=True)
    assert control["rating_spearman"] == pytest.approx(1.0, abs=1e-12)
    assert control["bm25_ndcg_shift"] == 0.0 and control["pools_changed"] == 0.0
    bt = audit.filter(pl.col("fix") == "bt_exact").row(0, named=True)
    assert bt["pools_changed"] == 0.0 and bt["judge_backend_calls"] == 0
    for fix in ("sit_outs", "presentation", "bt_exact"):  # each differs by itself, if at all
        row = audit.filter(pl.col("fix") == fix).row(0, named=True)
        assert row["pools_changed"] == 0.0
    report = (build.export_dir / "report.md").read_text()
    assert "## Published-defect audit" in report and "ancestor_check on" in report
    assert "control (no fix) | reproduces the build" in report
    assert "| method | sabermath |" in report


def test_released_schema_reads_back_with_datasets(sabermath_build, tmp_path, capsys):
    from datasets import load_from_disk

    from saber_cli.main import main
    from saber_eval.loading import load_benchmark

    build, store, _, _ = sabermath_build
    out = tmp_path / "released"
    args = ["export", "--format", "sabermath", "--benchmark", str(build.export_dir)]
    assert main([*args, "--out", str(out)]) == 0
    documents_in_pools = len(set(store.read_table("candidate_pools")["doc_id"]))
    assert capsys.readouterr().out.splitlines() == [
        f"{out / 'queries'}: 8 rows",
        f"{out / 'documents'}: {documents_in_pools} rows",
    ]
    queries, documents = (
        load_from_disk(str(out / "queries")),
        load_from_disk(str(out / "documents")),
    )
    assert queries.column_names == [
        "id",
        "problem",
        "solution",
        "candidates",
        "relevance_scores",
        "domains",
        "tags",
        "idea",
        "original_index",
        "bma_scores",
        "jaccard_scores",
    ]
    assert documents.column_names == ["id", "problem", "solution", "tags", "idea", "original_index"]
    order = documents["original_index"]
    assert order == sorted(order)
    ratings = store.read_table("bt_ratings")
    pools = store.read_table("candidate_pools").sort("query_id", "position")
    for row in queries:
        ids = [documents[p]["id"] for p in row["candidates"]]
        assert ids == pools.filter(pl.col("query_id") == row["id"])["doc_id"].to_list()
        mine = ratings.filter(pl.col("query_id") == row["id"]).sort("position")["rating"]
        np.testing.assert_allclose(row["relevance_scores"], mine.to_numpy())
    benchmark = load_benchmark(out)
    assert [q.query_id for q in benchmark.queries] == queries["id"]
    assert "Algebra|Geometry" in {q.domain for q in benchmark.queries}


def test_most_topics_rejected_stops_at_the_annotation_with_the_setting(tmp_path):
    """A tag-path corpus built with the platform's default (CHAMP's node file): every topic is
    rejected — the build stops at topic_annotations and names ontology_source: tag_paths."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in tag_corpus(40)))
    build = load_build_config("tiny", home=str(tmp_path / "h"), corpus=str(corpus))
    with pytest.raises(Exception, match=r"look like tag paths.*SABER_ONTOLOGY_SOURCE=tag_paths"):
        run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"n_topic_only": 500}, r"no row of the .*Lower the group sizes"),
        ({"domain_quotas": {"Algebra": 999}}, r"bucket \('Algebra',\).*SABER_DOMAIN_QUOTAS"),
    ],
)
def test_no_target_or_unmet_quota_says_why(tmp_path, overrides, message):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in tag_corpus(60)))
    settings = {**SETTINGS, **overrides}
    build = load_build_config("tiny", home=str(tmp_path / "h"), corpus=str(corpus), **settings)
    with pytest.raises(Exception, match=message):
        run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
