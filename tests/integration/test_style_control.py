"""``rating.style_control`` on the tiny build: off changes nothing, on rates by the style-free
strengths; the validity report's "Style" section either way."""

import dagster as dg
import numpy as np
import pytest
from scipy.stats import spearmanr

from saber_cli.build import run_build
from saber_config import PlanError, load_build_config
from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import PlayedRounds
from saber_store.database import DuckDBStore


def _figures(result, asset: str) -> dict:
    return next(
        e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == asset
    )


def _strengths(store: DuckDBStore) -> tuple[np.ndarray, np.ndarray]:
    """(stored bt_ratings strengths, the plain exact fit of the stored judgments), (Q, n)."""
    ratings = store.read_table("bt_ratings").sort("query_id", "position")
    query_ids = ratings["query_id"].unique(maintain_order=True).to_list()
    n = ratings.height // len(query_ids)
    played = PlayedRounds.from_frame(store.read_table("judgments"), query_ids, n)
    plain = fit_bradley_terry(played.comparisons(False), C=1.0)
    return ratings["strength"].to_numpy().reshape(len(query_ids), n), plain


@pytest.fixture(scope="module")
def styled_build(tmp_path_factory):
    home = tmp_path_factory.mktemp("saber_style")
    build = load_build_config("tiny", home=str(home), style_control=True)
    result = run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
    return build, DuckDBStore(database=str(build.database_path)), result


def test_off_the_ratings_are_the_plain_fit_and_the_report_has_a_style_section(tiny_build):
    build, store, result = tiny_build
    stored, plain = _strengths(store)
    np.testing.assert_allclose(stored, plain, atol=1e-9)
    style = _figures(result, "validity_report")["style"].value
    assert style["style_control"] is False
    assert set(style["coefficients"]) >= {"length"}
    for c in style["coefficients"].values():
        assert c["lower"] < c["beta"] < c["upper"]
        assert 0.0 <= c["variance_share"] <= style["total_variance_share"] + 1e-12
    assert 0.5 < style["ngram_cv_auc"] <= 1.0  # GPT-4 vs human CHAMP solutions differ in style
    report = (build.export_dir / "validity.md").read_text()
    assert "## Style" in report
    assert all(f"| {name} | " in report for name in style["coefficients"])


def test_on_the_ratings_are_the_style_free_strengths(styled_build):
    _, store, result = styled_build
    stored, plain = _strengths(store)
    assert np.abs(stored - plain).max() > 1e-3  # the style terms moved the strengths
    ratings = store.read_table("bt_ratings").sort("query_id", "position")
    lo, hi = stored.min(axis=1, keepdims=True), stored.max(axis=1, keepdims=True)
    np.testing.assert_allclose(
        ratings["rating"].to_numpy().reshape(stored.shape), 5 * (stored - lo) / (hi - lo)
    )
    # the report's comparison of the two rankings, recomputed from the stored ratings
    style = _figures(result, "validity_report")["style"].value
    assert style["style_control"] is True
    rho = np.mean([spearmanr(p, s).statistic for p, s in zip(plain, stored, strict=True)])
    assert style["plain_vs_style_free_spearman"] == pytest.approx(rho, abs=1e-6)
    rank = lambda x: np.argsort(np.argsort(-x, axis=1, kind="stable"), axis=1)  # noqa: E731
    assert style["n_rank_changes"] == int((rank(plain) != rank(stored)).sum())
    # bt_ratings and the report fit the same model on the same judgments
    fitted = _figures(result, "bt_ratings")["style"].value["coefficients"]
    for name, c in style["coefficients"].items():
        assert fitted[name]["beta"] == pytest.approx(c["beta"], rel=1e-6)


def test_style_control_needs_the_exact_fit():
    with pytest.raises(PlanError) as err:
        load_build_config("default", method="sabermath", style_control=True).plan()
    assert "rating.style_control (override) conflicts with rating.fit" in str(err.value)
    plan = load_build_config("default", method="sabermath", style_control=True, bt="exact").plan()
    assert plan.rating.style_control and plan.rating.fit == "exact"
