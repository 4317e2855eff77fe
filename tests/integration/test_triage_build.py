"""Triage in the build (issue 29): a tiny build whose pools are graded by ``st:minilm`` and whose
confidently graded pairs skip the pairwise judge, against the plain tiny build."""

import dagster as dg
import numpy as np
import polars as pl
import pytest

from saber_cli.build import run_build
from saber_config import load_build_config
from saber_core.validity.triage_round import TRIAGE_JUDGE_KIND
from saber_store.database import DuckDBStore

THRESHOLD = 0.3


def _figures(result, asset: str) -> dict:
    return {
        k: v.value
        for k, v in next(
            e.event_specific_data.materialization.metadata
            for e in result.get_asset_materialization_events()
            if e.asset_key.to_user_string() == asset
        ).items()
    }


@pytest.fixture(scope="module")
def triaged_build(tmp_path_factory):
    home = tmp_path_factory.mktemp("saber_triage")
    build = load_build_config(
        "tiny",
        home=str(home),
        pointwise_judge="st:minilm",
        triage="calibrated",
        triage_threshold=THRESHOLD,
    )
    result = run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
    return build, DuckDBStore(database=str(build.database_path)), result


def test_triage_makes_fewer_judge_calls_and_says_how_many_it_saved(triaged_build, tiny_build):
    build, store, result = triaged_build
    _, plain_store, _ = tiny_build
    judgments = store.read_table("judgments")
    decided = judgments.filter(pl.col("judge_kind") == TRIAGE_JUDGE_KIND)
    judged = judgments.height - decided.height
    plain = plain_store.read_table("judgments")
    assert plain.filter(pl.col("judge_kind") == TRIAGE_JUDGE_KIND).height == 0
    assert judgments.height == plain.height  # the same number of pairs is played
    assert 0 < decided.height and judged < plain.height
    rounds = [_figures(result, f"tournament_round_{r:02d}") for r in range(1, 4)]
    assert rounds[0]["n_decided_by_triage"] == 0  # calibrated: round 1 calibrates the slope
    assert sum(f["n_decided_by_triage"] for f in rounds) == decided.height
    assert sum(f["judge_calls_saved"] for f in rounds) == decided.height  # 1 call per pair
    assert all(f["n_judged"] + f["n_decided_by_triage"] == f["n_pairs"] for f in rounds)
    totals = _figures(result, "judgments")
    assert totals["n_decided_by_triage"] == decided.height
    assert totals["judge_calls_saved_by_triage"] == decided.height
    assert totals["judge_calls"] == judged
    assert store.read_table("tournament_queries")["judge_calls"].sum() == judged
    report = (build.export_dir / "report.md").read_text()
    assert f"| pairs decided by triage | {decided.height} |" in report
    assert f"| pairs judged | {judged} |" in report


def test_decided_rows_carry_their_provenance_and_follow_the_grades(triaged_build):
    _, store, _ = triaged_build
    grades = store.read_table("pointwise_grades")
    pools = store.read_table("candidate_pools")
    assert grades.height == pools.height
    assert grades["judge_kind"].unique().to_list() == ["pointwise-sentence-transformers"]
    assert grades["run_id"].null_count() == 0 and grades["input_hash"].n_unique() == grades.height
    score = {(q, p): s for q, p, s in grades.select("query_id", "position", "score").rows()}
    decided = store.read_table("judgments").filter(pl.col("judge_kind") == TRIAGE_JUDGE_KIND)
    assert decided["judge_model"].unique().to_list() == ["minilm"]
    assert (
        decided["judge_model_hash"].unique().to_list()
        == grades["judge_model_hash"].unique().to_list()
    )
    assert decided["sampling_params"].str.contains('"triage": "calibrated"').all()
    assert decided["raw"].str.starts_with("grades ").all()
    assert decided["call_keys"].unique().to_list() == [""]
    p = decided["p_a"].to_numpy()
    assert (np.abs(p - 0.5) >= THRESHOLD).all()
    np.testing.assert_array_equal(decided["outcome"].to_numpy(), (p > 0.5).astype(float))
    margin = np.array(
        [
            score[(q, a)] - score[(q, b)]
            for q, a, b in decided.select("query_id", "pos_a", "pos_b").rows()
        ]
    )
    np.testing.assert_array_equal(margin > 0, p > 0.5)  # the better graded candidate wins


def test_every_candidate_is_rated_and_an_untriaged_build_has_no_grades(triaged_build, tiny_build):
    _, store, result = triaged_build
    ratings = store.read_table("bt_ratings")
    pools = store.read_table("candidate_pools")
    assert ratings.height == pools.height
    assert ratings["rating"].is_finite().all()
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["no_missing_ratings"] and checks["once_per_round_no_rematch"]
    _, plain_store, _ = tiny_build
    assert plain_store.read_table("pointwise_grades").height == 0
