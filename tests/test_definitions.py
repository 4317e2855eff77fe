"""The Definitions load with every asset, check and the build job; saber_core stays Dagster-free."""

import subprocess
import sys

import dagster as dg

from saber_assets.definitions import BUILD_JOB, build_definitions
from saber_resources.config import load_build_config

STAGES = [
    "corpus",
    "ontology",
    "summaries",
    "topic_annotations",
    "queries",
    "topic_similarity",
    "summary_similarity",
    "candidate_pools",
    "judgments",
    "bt_ratings",
    "benchmark_export",
    "build_report",
    "retriever_runs",
    "rating_intervals",
    "validity_report",
    "recipe_sensitivity",
    "leaderboard",
]
CHECKS = {
    ("corpus", "counts_reconcile"),
    ("candidate_pools", "pool_size_and_split"),
    ("candidate_pools", "no_self_or_duplicate_candidates"),
    ("judgments", "once_per_round_no_rematch"),
    ("bt_ratings", "ratings_in_range"),
    ("bt_ratings", "no_missing_ratings"),
    ("validity_report", "no_contaminated_queries"),
    ("recipe_sensitivity", "recipe_tournament_valid"),
}


def test_definitions_hold_every_asset_check_and_job(tmp_path):
    build = load_build_config("default", home=str(tmp_path))
    defs = build_definitions(build)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    rounds = {f"tournament_round_{r:02d}" for r in range(1, build.rounds + 1)}
    assert keys == set(STAGES) | rounds
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    assert checks == CHECKS
    assert defs.resolve_job_def(BUILD_JOB) is not None
    # each round depends on the previous one's standings
    parents = graph.get(dg.AssetKey("tournament_round_02")).parent_keys
    assert dg.AssetKey("tournament_round_01") in parents


def test_paper_profile_is_one_config_away(tmp_path):
    build = load_build_config("paper", home=str(tmp_path))
    assert (build.n_queries, build.pool_config().pool_size, build.rounds) == (1000, 150, 20)
    keys = build_definitions(build).resolve_asset_graph().get_all_asset_keys()
    assert dg.AssetKey("tournament_round_20") in keys


def test_workspace_module_loads_definitions():
    code = "import saber_assets.definitions as d; print(type(d.defs).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() in {"Definitions", "function", "LazyDefinitions"}


def test_importing_saber_core_does_not_import_dagster():
    code = (
        "import sys, saber_core, saber_core.ontology, saber_core.text, saber_core.pools, "
        "saber_core.tournament, saber_core.bradley_terry, saber_core.metrics, saber_core.corpus, "
        "saber_core.formats; print('dagster' in sys.modules, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
