"""``saber plan`` says what a build would do and why; ``manifest.json`` records what made a build,
and ``saber build --from-manifest`` makes it again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from fakes import CALLS, ScriptedBackend

from saber_cli.build import run_build
from saber_cli.plan import plan_build
from saber_config import load_build_config
from saber_lineage.code_version import PROJECT_ROOT
from saber_lineage.provenance import ManifestMismatch, config_from_manifest, settings_of
from saber_llm.embeddings.cache import EmbeddingCache
from saber_llm.prompts import PROMPTS_DIR
from saber_store.database import DuckDBStore

LLM = {"summaries": "llm", "topics": "llm", "judge": "llm", "corpus_limit": 24, "rounds": 2,
       "recipe_queries": 1}  # fmt: skip
TABLES = ("corpus", "queries", "candidate_pools", "judgments", "bt_ratings", "rating_intervals")


def _actions(decisions) -> dict[str, str]:
    return {d.asset: d.action for d in decisions}


def test_after_a_build_everything_is_reused(tiny_build):
    build, _, _ = tiny_build
    decisions = plan_build(build)
    assert decisions and set(_actions(decisions).values()) == {"reuse"}


def test_a_setting_recomputes_only_its_readers_and_what_they_feed(tiny_build):
    build, _, _ = tiny_build
    changed = load_build_config("tiny", home=build.home, validity_bootstrap=500)
    decisions = {d.asset: d for d in plan_build(changed)}
    moving = {a for a, d in decisions.items() if d.action != "reuse"}
    because_of_setting = {a for a in moving if "settings" in decisions[a].causes}
    assert because_of_setting == {"rating_intervals"}
    assert decisions["rating_intervals"].reasons == ["setting validity.bootstrap: 200 → 500"]
    # everything else that moves only follows an upstream (or the manifest recording the change)
    assert all(
        set(decisions[a].causes) <= {"upstream", "inputs"} for a in moving - {"rating_intervals"}
    )
    assert {"corpus", "candidate_pools", "judgments", "bt_ratings"}.isdisjoint(moving)


def test_a_shared_embedding_cache_is_a_location_not_a_setting(tiny_build, tmp_path):
    """The session's builds embed into one cache file (``SABER_EMBEDDING_CACHE``, set by
    tests/conftest.py): pointing a build at another file recomputes nothing and leaves what the
    manifest records as it was."""
    build, _, _ = tiny_build
    shared = Path(os.environ["SABER_EMBEDDING_CACHE"])
    assert build.eval_cache_path == shared and EmbeddingCache(shared).stored_count() > 0
    assert not (build.home_path / "cache" / "eval_cache.duckdb").exists()
    moved = load_build_config("tiny", home=build.home, embedding_cache=str(tmp_path / "e.duckdb"))
    assert set(_actions(plan_build(moved)).values()) == {"reuse"}
    assert settings_of(moved) == settings_of(build) and "embedding_cache" not in moved.explicit


@pytest.fixture(scope="module")
def llm_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("plan_llm")
    build = load_build_config("tiny", home=str(home), **LLM)
    CALLS.clear()
    assert run_build(build, dg.DagsterInstance.ephemeral(), ScriptedBackend()).success
    return home


@pytest.mark.e2e
def test_an_edited_judge_prompt_recomputes_the_rounds_and_counts_the_misses(llm_home, tmp_path):
    prompts = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, prompts)
    judge = prompts / "judge.md"
    judge.write_text(judge.read_text().replace("[user]", "[user]\nBe careful.", 1))
    copied = load_build_config("tiny", home=str(llm_home), prompts_dir=str(prompts), **LLM)
    decisions = {d.asset: d for d in plan_build(copied, backend=ScriptedBackend())}
    for asset in ("corpus", "summaries", "topic_annotations", "candidate_pools"):
        assert decisions[asset].action == "reuse", (asset, decisions[asset].reasons)
    for r in (1, 2):
        round_ = decisions[f"tournament_round_{r:02d}"]
        assert round_.action == "recompute" and "input judge changed" in round_.reasons
        assert round_.llm_calls_certain and round_.llm_calls > 0
    assert decisions["bt_ratings"].action == "recompute"


def test_the_manifest_records_code_settings_versions_and_inputs(tiny_build):
    build, _, _ = tiny_build
    manifest = json.loads((build.export_dir / "manifest.json").read_text())
    made = manifest["build"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    if head.returncode == 0:  # a clone: the commit and whether the tree differs from it
        assert made["code"]["commit"] == head.stdout.strip()
        assert isinstance(made["code"]["dirty"], bool)
    else:  # an unpacked copy without git: recorded as unknown, not guessed
        assert made["code"]["commit"] is None and made["code"]["dirty"] is None
    assert made["settings"]["tournament"]["rounds"] == build.tournament.rounds
    assert made["resolved"]["tournament"]["pairing"] == "swiss"
    assert made["packages"]["torch"] and made["packages"]["dagster"] == "1.13.27"
    assert made["inputs"]["corpus"].startswith("champ-dataset==")
    assert set(made["prompts"]) >= {"judge", "summary", "topics"}
    assert made["models"]["judge"]["judge_kind"] == "embedding-cosine-margin"
    assert manifest["files"]["queries.jsonl"] > 0
    store = DuckDBStore(database=str(build.database_path))
    assert manifest["assets"]["bt_ratings"] == store.versions_of(["bt_ratings"])["bt_ratings"]


def _rows(store: DuckDBStore, table: str) -> pl.DataFrame:
    frame = store.read_table(table)
    return frame.drop([c for c in frame.columns if c.startswith("_")]).sort(frame.columns[:3])


@pytest.mark.e2e
def test_from_manifest_rebuilds_equal_tables(tiny_build, tmp_path):
    build, store, _ = tiny_build
    home = tmp_path / "again"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SABER_")}
    env.update(SABER_HOME=str(home), DAGSTER_HOME=str(home / "dagster_home"))
    (home / "dagster_home").mkdir(parents=True)
    manifest = build.export_dir / "manifest.json"
    done = subprocess.run(
        [sys.executable, "-m", "saber_cli.main", "build", "--from-manifest", str(manifest)],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    again = DuckDBStore(database=str(home / "saber.duckdb"))
    for table in TABLES:
        assert _rows(again, table).equals(_rows(store, table)), table


def test_from_manifest_refuses_an_input_whose_content_changed(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"doc_id": "a", "problem": "p", "solution": "s"}\n')
    build = load_build_config("tiny", home=str(tmp_path / "h"), corpus=str(corpus))
    made = {"settings": build.model_dump(), "code": {}, "packages": {},
            "inputs": {"corpus": "sha256:" + "0" * 64}}  # fmt: skip
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"build": made}, default=str))
    with pytest.raises(ManifestMismatch, match=r"corpus: the manifest's build read sha256:0+"):
        config_from_manifest(path, str(tmp_path / "h2"))
