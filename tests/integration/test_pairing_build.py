"""The pairing strategy and soft outcomes as a build config: the round assets pair exactly as
the pure ``saber_core.pairing.run_pairing`` does when it replays the build's own verdicts."""

import dagster as dg
import numpy as np
import pytest

from saber_assets.tables import pool_matrix
from saber_assets.tournament import round_name
from saber_cli.build import run_build
from saber_core.bradley_terry import fit_bradley_terry
from saber_core.comparisons import Comparisons
from saber_core.pairing import run_pairing
from saber_resources.config import load_build_config
from saber_resources.storage import DuckDBStore


@pytest.fixture(scope="module")
def information_build(tmp_path_factory):
    home = tmp_path_factory.mktemp("saber_info")
    build = load_build_config(
        "tiny", home=str(home), pairing="information", bt_soft=True, rounds=4, recipe_queries=3
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
    verdicts = {
        (index[q], a, b): p
        for q, a, b, p in table.select("query_id", "pos_a", "pos_b", "p_a").rows()
    }

    def judge(_round, pairs):
        out = np.full(pairs.shape[:2], np.nan)
        for qi, slot in zip(*np.nonzero(pairs[..., 0] >= 0), strict=True):
            p = verdicts[(int(qi), int(pairs[qi, slot, 0]), int(pairs[qi, slot, 1]))]
            out[qi, slot] = np.nan if p is None else p
        return out

    res = run_pairing(
        nq,
        n,
        build.tournament.rounds,
        judge,
        seed=build.seed,
        strategy=build.tournament.pairing,
        soft=build.tournament.bt_soft,
        C=build.tournament.bt_c,
    )
    return query_ids, res


def built_pairs(build, store, query_ids, shape):
    pairs = np.full(shape, -1, dtype=np.int64)
    index = {q: i for i, q in enumerate(query_ids)}
    for r in range(1, build.tournament.rounds + 1):
        for q, slot, a, b in (
            store.read_table(round_name(r)).select("query_id", "slot", "pos_a", "pos_b").rows()
        ):
            pairs[r - 1, index[q], slot] = a, b
    return pairs


@pytest.mark.parametrize("which", ["swiss_hard", "information_soft"])
def test_round_assets_pair_like_the_core_strategy(which, tiny_build, information_build):
    build, store, result = tiny_build if which == "swiss_hard" else information_build
    assert result.success
    assert (build.tournament.pairing, build.tournament.bt_soft) == (
        ("swiss", False) if which == "swiss_hard" else ("information", True)
    )
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
    hard = fit_bradley_terry(rows, C=build.tournament.bt_c)
    strength = store.read_table("bt_ratings").sort("query_id", "position")["strength"].to_numpy()
    assert not np.allclose(strength, hard.ravel(), atol=1e-3)
    # soft p lies strictly inside (0, 1) for the embedding judge: the soft fit is less extreme
    assert np.abs(strength).max() < np.abs(hard).max()
    # the other-recipe tournament runs on a seeded sample of 3 queries, with the same settings
    recipe = store.read_table("recipe_judgments")
    assert recipe["query_id"].n_unique() == 3 == store.read_table("recipe_queries").height
    assert recipe.height == 3 * build.tournament.rounds * build.pool_config().pool_size // 2
