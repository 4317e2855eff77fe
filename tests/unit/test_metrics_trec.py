"""nDCG@10 as trec_eval computes it (linear gain, integer labels, ties by descending doc id),
against pytrec_eval and ir_measures, and the integer-label convention by hand."""

import math

import numpy as np
import pytest

from saber_core.evaluation.metrics import integer_labels, ndcg_at_k, ndcg_trec, trec_tiebreak

LOG2_3 = math.log2(3)


def test_integer_labels_round_half_up_by_hand():
    ratings = np.array([0.0, 0.49, 0.5, 1.5, 2.5, 2.4999, 4.5, 5.0])
    assert integer_labels(ratings).tolist() == [0, 0, 1, 2, 3, 2, 5, 5]  # not banker's rounding
    # 0–100 (MTEB): rating / 5 · 100 = 20 · rating, half up
    assert integer_labels(np.array([0.0, 0.025, 1.25, 4.975, 5.0]), 20).tolist() == [
        0,
        1,
        25,
        100,
        100,
    ]


def test_linear_gain_hand_worked_with_ties_by_descending_doc_id():
    # candidates in column order a, c, b; a and b tie: trec_eval ranks "b" before "a"
    scores = np.array([[0.5, 0.9, 0.5]])
    labels = np.array([[3.0, 0.0, 1.0]])
    dcg = 0 + 1 / LOG2_3 + 3 / 2  # ranks: c (0), b (1), a (3)
    idcg = 3 + 1 / LOG2_3
    assert ndcg_trec(scores, labels, [["a", "c", "b"]], 10) == pytest.approx([dcg / idcg])
    # column order (the default) would rank a before b instead
    column = (0 + 3 / LOG2_3 + 1 / 2) / idcg
    assert ndcg_at_k(scores, labels, 10, gain="linear") == pytest.approx([column])
    assert trec_tiebreak([["a", "c", "b"], ["z"]], 3).tolist() == [[0, 2, 1], [0, -1, -1]]


def _random_case(rng: np.random.Generator, n_queries: int):
    ids, scores, labels = [], [], []
    for q in range(n_queries):
        n = int(rng.integers(1, 25))
        ids.append([f"d{int(rng.integers(0, 10_000)):05d}-{q}-{j}" for j in range(n)])
        scores.append(np.round(rng.random(n), 1))  # one decimal: many ties
        labels.append(rng.integers(0, 6, n).astype(float))
    width = max(len(c) for c in ids)
    score_m = np.full((n_queries, width), np.nan)
    label_m = np.zeros((n_queries, width))
    for i, (s, lab) in enumerate(zip(scores, labels, strict=True)):
        score_m[i, : len(s)], label_m[i, : len(lab)] = s, lab
    return ids, scores, labels, score_m, label_m


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ndcg_trec_equals_pytrec_eval_with_ties_and_ragged_pools(seed):
    import pytrec_eval

    rng = np.random.default_rng(seed)
    ids, scores, labels, score_m, label_m = _random_case(rng, 40)
    qrels = {
        f"q{i}": {d: int(v) for d, v in zip(ids[i], labels[i], strict=True)}
        for i in range(len(ids))
    }
    run = {
        f"q{i}": {d: float(s) for d, s in zip(ids[i], scores[i], strict=True)}
        for i in range(len(ids))
    }
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    ours = ndcg_trec(score_m, label_m, ids, 10)
    for i in range(len(ids)):
        assert ours[i] == pytest.approx(expected[f"q{i}"]["ndcg_cut_10"], abs=1e-12)


def test_ndcg_trec_equals_ir_measures():
    import ir_measures
    from ir_measures import Qrel, ScoredDoc, nDCG

    rng = np.random.default_rng(7)
    ids, scores, labels, score_m, label_m = _random_case(rng, 25)
    qrels = [
        Qrel(f"q{i}", d, int(v))
        for i in range(len(ids))
        for d, v in zip(ids[i], labels[i], strict=True)
    ]
    run = [
        ScoredDoc(f"q{i}", d, float(s))
        for i in range(len(ids))
        for d, s in zip(ids[i], scores[i], strict=True)
    ]
    per_query = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], qrels, run)}
    ours = ndcg_trec(score_m, label_m, ids, 10)
    assert [per_query[f"q{i}"] for i in range(len(ids))] == pytest.approx(ours.tolist())
