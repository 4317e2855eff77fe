"""The pairing strategy and soft outcomes as a build config: the round assets pair exactly as
the pure ``saber_core.tournament.pairing.run_pairing`` does when it replays the build's own
verdicts."""

import dagster as dg
import numpy as np
import polars as pl
import pytest

from saber_assets.tables import pool_matrix
from saber_assets.tournament import round_name
from saber_cli.build import run_build
from saber_config import load_build_config
from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import Comparisons
from saber_core.tournament.pairing import run_pairing
from saber_store.database import DuckDBStore


@pytest.fixture(scope="module")
def information_build(tmp_path_factory):
    home = tmp_path_factory.mktemp("saber_info")
    build = load_build_config(
        "tiny", home=str(home), pairing="information", bt_soft=True, rounds=4, recipe_queries=3
    )
    result = run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
    return build, DuckDBStore(database=str(build.database_path)), result


@pytest.fixture(scope="module")
def adaptive_build(tmp_path_factory):
    """The top-focused adaptive tournament with the seeded random presentation order."""
    home = tmp_path_factory.mktemp("saber_adaptive")
    build = load_build_config(
        "tiny",
        home=str(home),
        pairing="adaptive",
        presentation="seeded_random",
        rounds=6,
        adaptive_warmup=2,
        recipe_queries=3,
    )
    result = run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
    return build, DuckDBStore(database=str(build.database_path)), result


def replay(build, store):
    """Play ``run_pairing`` with a judge that answers from the build's judgments table (a pair
    the build never judged raises KeyError, so any divergence in pairing fails loudly)."""
    query_ids, docs = pool_matrix(store)
    nq, n = docs.shape
    table = store.read_table("judgments")
    index = {q: i for i, q in enumerate(query_ids)}
    verdicts = {  # keyed smaller position first (a pair may have been shown swapped)
        (index[q], min(a, b), max(a, b)): p if p is None or a < b else 1.0 - p
        for q, a, b, p in table.select("query_id", "pos_a", "pos_b", "p_a").rows()
    }

    def judge(_round, pairs):
        out = np.full(pairs.shape[:2], np.nan)
        for qi, slot in zip(*np.nonzero(pairs[..., 0] >= 0), strict=True):
            p = verdicts[(int(qi), int(pairs[qi, slot, 0]), int(pairs[qi, slot, 1]))]
            out[qi, slot] = np.nan if p is None else p
        return out

    rules = build.plan().tournament.rules
    res = run_pairing(
        nq,
        n,
        build.tournament.rounds,
        judge,
        seed=build.seed,
        strategy=build.plan().tournament.pairing,
        soft=build.rating.soft,
        C=build.rating.c,
        rule=rules.rule,
    )
    return query_ids, res


def built_pairs(build, store, query_ids, shape):
    pairs = np.full(shape, -1, dtype=np.int64)
    index = {q: i for i, q in enumerate(query_ids)}
    for r in range(1, build.tournament.rounds + 1):
        for q, slot, a, b in (
            store.read_table(round_name(r)).select("query_id", "slot", "pos_a", "pos_b").rows()
        ):
            pairs[r - 1, index[q], slot] = min(a, b), max(a, b)
    return pairs


@pytest.mark.parametrize("which", ["swiss_hard", "information_soft", "adaptive_random"])
def test_round_assets_pair_like_the_core_strategy(
    which, tiny_build, information_build, adaptive_build
):
    build, store, result = {
        "swiss_hard": tiny_build,
        "information_soft": information_build,
        "adaptive_random": adaptive_build,
    }[which]
    assert result.success
    assert (build.plan().tournament.pairing, build.rating.soft) == {
        "swiss_hard": ("swiss", False),
        "information_soft": ("information", True),
        "adaptive_random": ("adaptive", False),
    }[which]
    query_ids, res = replay(build, store)
    np.testing.assert_array_equal(built_pairs(build, store, query_ids, res.pairs.shape), res.pairs)
    ratings = store.read_table("bt_ratings").sort("query_id", "position")
    strength = ratings["strength"].to_numpy().reshape(res.strengths.shape)
    np.testing.assert_allclose(strength, res.strengths, atol=1e-6)


def test_soft_ratings_differ_from_hard_and_checks_pass(information_build):
    build, store, result = information_build
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
    query_ids, docs = pool_matrix(store)
    t = store.read_table("judgments")
    index = {q: i for i, q in enumerate(query_ids)}
    q = np.array([index[x] for x in t["query_id"]])
    rows = Comparisons(
        q, t["pos_a"], t["pos_b"], t["outcome"].fill_null(np.nan).to_numpy(), *docs.shape
    )
    hard = fit_bradley_terry(rows, C=build.rating.c)
    strength = store.read_table("bt_ratings").sort("query_id", "position")["strength"].to_numpy()
    assert not np.allclose(strength, hard.ravel(), atol=1e-3)
    # soft p lies strictly inside (0, 1) for the embedding judge: the soft fit is less extreme
    assert np.abs(strength).max() < np.abs(hard).max()
    # the other-recipe tournament runs on a seeded sample of 3 queries, with the same settings
    recipe = store.read_table("recipe_judgments")
    assert recipe["query_id"].n_unique() == 3 == store.read_table("recipe_queries").height
    assert recipe.height == 3 * build.tournament.rounds * build.plan().pools.config.pool_size // 2


def test_adaptive_build_records_calls_stops_and_presentation(adaptive_build):
    """Per query: the calls spent equal its judgments and the stop reason is the replay's;
    the validity report shows the calls saved and the leaderboard τ; pairs are shown in the
    seeded random order (both orders occur) and the checks pass."""
    build, store, result = adaptive_build
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
    query_ids, res = replay(build, store)
    per_query = store.read_table("tournament_queries").sort("query_id")
    judged = store.read_table("judgments").group_by("query_id").len().sort("query_id")
    assert per_query["judge_calls"].to_list() == judged["len"].to_list()  # one call per pair
    for q, reason in per_query.select("query_id", "stop_reason").rows():
        column = res.status[:, query_ids.index(q)].tolist()
        stops = [s for s in column if s in ("stable", "exhausted")]
        assert reason == (stops[0] if stops else "max_rounds")
    table = store.read_table("judgments")
    assert (table["shown_first"] == "seeded_random").all()
    swapped = (table["pos_a"] > table["pos_b"]).mean()
    assert 0.2 < swapped < 0.8
    figures = store.manifest_entry("validity_report")["metadata"]["figures"]
    n = store.read_table("candidate_pools").group_by("query_id").len()["len"]
    full = int((n // 2).sum()) * build.tournament.rounds
    assert figures["judge_calls_full_swiss"] == full
    assert figures["judge_calls_saved"] == pytest.approx(1 - table.height / full)
    assert figures["judge_calls_saved"] > 0
    assert -1.0 <= figures["leaderboard_tau_vs_round_robin"] <= 1.0
    assert figures["presentation"] == "seeded_random"
    assert 0.0 <= figures["first_answer_share"] <= 1.0
    rr = store.read_table("validity_round_robin")
    ratings = store.read_table("bt_ratings")
    diffs = []
    for q, strength in rr.select("query_id", "round_robin_strength").rows():
        own = ratings.filter(pl.col("query_id") == q).sort("position")["rating"].to_numpy()
        s = np.array(strength)
        e = own - 5 * (s - s.min()) / (s.max() - s.min())
        diffs.append(e[: len(e) // 2].mean() - e[len(e) // 2 :].mean())
    assert figures["group_bias_vs_round_robin"] == pytest.approx(np.mean(diffs))


def test_environment_selects_adaptive_pairing_and_presentation(monkeypatch, tmp_path):
    """``SABER_PAIRING`` / ``SABER_PRESENTATION`` / ``SABER_ADAPTIVE_*`` reach the round rules;
    the Swiss default's rules carry no refit or adaptive settings (changing those leaves the
    rounds valid)."""
    base = load_build_config("tiny", home=str(tmp_path)).plan().tournament
    assert (base.rules.strategy, base.rules.seed, base.rules.soft, base.rules.n_rounds) == (
        "swiss", 0, False, 0)  # fmt: skip
    assert base.presentation == "pool_order"
    assert base.calls_per_judgment == 1  # the embedding judge answers once
    llm = load_build_config("tiny", home=str(tmp_path), judge="llm").plan().tournament
    assert llm.presentation == "both_orders" and llm.calls_per_judgment == 2
    single = load_build_config("tiny", home=str(tmp_path), judge="llm", judge_both_orders=False)
    assert single.plan().tournament.presentation == "pool_order"
    assert single.plan().tournament.calls_per_judgment == 1
    monkeypatch.setenv("SABER_PAIRING", "adaptive")
    monkeypatch.setenv("SABER_PRESENTATION", "seeded_random")
    monkeypatch.setenv("SABER_ADAPTIVE_WARMUP", "3")
    rules = load_build_config("tiny", home=str(tmp_path)).plan().tournament.rules
    assert (rules.strategy, rules.order, rules.shown_first) == (
        "adaptive",
        "seeded_random",
        "seeded_random",
    )
    assert rules.rule.warmup == 3
