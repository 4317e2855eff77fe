"""Swiss-BT vs round-robin BT on a query sample, against scikit-learn and scipy references."""

from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
from scipy.stats import kendalltau

from saber_core.tournament.judgment_table import RoundRules, play_tournament
from saber_core.validity.round_robin import round_robin_agreement, round_robin_sample


@dataclass
class Verdict:
    p_first: np.ndarray
    raw: list[str]
    drop_reason: list[str | None]
    call_keys: list[str]


def judge_from(strength: dict[str, float], asked: list[int]):
    def judge(queries, first, second):
        asked.append(len(queries))
        p = np.array(
            [
                1 / (1 + np.exp(strength[b] - strength[a]))
                for a, b in zip(first, second, strict=True)
            ]
        )
        return Verdict(p, [""] * len(p), [None] * len(p), [""] * len(p))

    return judge


def sklearn_bt(a, b, y, n):
    """BT by scikit-learn: a soft outcome y is two weighted rows (a wins: y, b wins: 1 − y)."""
    from sklearn.linear_model import LogisticRegression

    x = np.zeros((len(a), n))
    x[np.arange(len(a)), a], x[np.arange(len(a)), b] = 1.0, -1.0
    model = LogisticRegression(fit_intercept=False, C=1.0, tol=1e-10, max_iter=10_000)
    labels = np.r_[np.ones(len(a)), np.zeros(len(a))]
    return model.fit(np.vstack([x, x]), labels, sample_weight=np.r_[y, 1 - y]).coef_[0]


def test_sample_is_seeded_sorted_and_capped():
    expected = np.sort(np.random.default_rng([4, 8]).choice(10, size=3, replace=False))
    np.testing.assert_array_equal(round_robin_sample(10, 3, seed=4), expected)
    assert round_robin_sample(2, 5, seed=0).tolist() == [0, 1]
    assert round_robin_sample(5, 0, seed=0).size == 0


@pytest.mark.parametrize("soft", [False, True])
def test_agreement_equals_a_reference_recomputation(soft):
    rng = np.random.default_rng(1)
    query_ids = ["q0", "q1", "q2"]
    docs = np.array([[f"{q}_{j}" for j in range(8)] for q in query_ids], dtype=object)
    texts = {x: x for x in [*query_ids, *docs.ravel().tolist()]}
    strength = {d: rng.normal(0, 1.5) for d in docs.ravel()}
    swiss = play_tournament(
        query_ids, docs, texts, judge_from(strength, []), RoundRules(n_rounds=3)
    )
    asked: list[int] = []
    out = round_robin_agreement(query_ids, docs, texts, swiss, judge_from(strength, asked),
                                k=2, seed=5, soft=soft)  # fmt: skip
    picked = [query_ids[i] for i in round_robin_sample(3, 2, seed=5)]
    assert out["query_id"].to_list() == picked
    assert asked == [28 - 12, 28 - 12]  # 8·7/2 pairs, minus the 3 × 4 Swiss games
    assert (out["new_judgments"] == 16).all() and (out["round_robin_pairs"] == 28).all()
    for row in out.iter_rows(named=True):
        d = docs[query_ids.index(row["query_id"])]
        i, j = np.triu_indices(8, k=1)
        p = np.array(
            [1 / (1 + np.exp(strength[d[b]] - strength[d[a]])) for a, b in zip(i, j, strict=True)]
        )
        full = sklearn_bt(i, j, p if soft else (p > 0.5).astype(float), 8)
        mine = swiss.filter(pl.col("query_id") == row["query_id"])
        y = mine["p_a"].to_numpy() if soft else mine["outcome"].to_numpy()
        part = sklearn_bt(mine["pos_a"].to_numpy(), mine["pos_b"].to_numpy(), y, 8)
        assert row["kendall_tau"] == pytest.approx(kendalltau(part, full).statistic, abs=1e-9)
        sx, sy = np.sign(np.subtract.outer(part, part)), np.sign(np.subtract.outer(full, full))
        agree = (sx == sy)[np.triu_indices(8, k=1)].mean()
        assert row["pairwise_agreement"] == pytest.approx(agree, abs=1e-9)
