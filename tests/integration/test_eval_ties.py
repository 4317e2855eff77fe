"""Ties in retriever scores: the runner, the run file and the leaderboard break them by
trec_eval's rule (score descending, doc id descending), checked against pytrec_eval on a
tie-heavy run, never by pool position."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from saber_core.evaluation.metrics import ndcg_at_k
from saber_eval.engines.base import Retriever, Task
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.runfile import read_run, tied_top_share
from saber_eval.runner import run_retriever, write_outputs


class FixedScores(Retriever):
    """Returns given scores per query id."""

    def __init__(self, scores: dict[str, np.ndarray]) -> None:
        self.spec, self.kind, self.scores = "fixed", "single-pass", scores

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        return self.scores[task.query_id], 0.0


def tie_heavy(folder: Path, seed: int = 0):
    """30 queries × 25 candidates with random ids; scores take 4 values (ties everywhere)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    docs, queries, scores = {}, [], {}
    for q in range(30):
        ids = [f"d{int(x):05d}" for x in rng.choice(100_000, 25, replace=False)]
        ratings = np.round(rng.random(25) * 5, 2)
        docs |= dict.fromkeys(ids)
        queries.append(
            {"query_id": f"q{q}", "problem": "p", "solution": "s", "domain": "Algebra",
             "candidates": ids, "relevance_scores": ratings.tolist(),
             "jaccard_scores": [0.0] * 25}
        )  # fmt: skip
        scores[f"q{q}"] = rng.integers(0, 4, 25).astype(float)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"doc_id": d, "problem": d, "solution": "s"}) + "\n" for d in docs)
    )
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    return load_benchmark(folder), queries, scores


def trec_eval_ranks(queries: list[dict], scores: dict[str, np.ndarray]) -> dict:
    """The rank trec_eval gives every (query, doc), read back from pytrec_eval's reciprocal
    rank with that doc as the only relevant one."""
    import pytrec_eval

    qrels, run = {}, {}
    for row in queries:
        ranked = {
            d: float(s) for d, s in zip(row["candidates"], scores[row["query_id"]], strict=True)
        }
        for doc in row["candidates"]:
            key = f"{row['query_id']}|{doc}"
            qrels[key], run[key] = {doc: 1}, ranked
    result = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    return {tuple(k.split("|")): round(1.0 / v["recip_rank"]) for k, v in result.items()}


def test_ranking_and_ndcg_follow_trec_eval_on_a_tie_heavy_run(tmp_path):
    bench, queries, scores = tie_heavy(tmp_path / "bench")
    result = run_retriever(
        bench, FixedScores(scores), "statement-full", load_registry().get("fixed")
    )
    ranks = trec_eval_ranks(queries, scores)
    run = read_run(write_outputs(result, tmp_path / "out")["run_file"])
    for row in queries:
        assert {d: r for d, r, _ in run[row["query_id"]]} == {
            d: ranks[(row["query_id"], d)] for d in row["candidates"]
        }
    # SABER's nDCG@10 (gain 2^y − 1 on the float ratings) over trec_eval's order, by hand
    expected = []
    for row in queries:
        gain = {
            d: 2.0**y - 1 for d, y in zip(row["candidates"], row["relevance_scores"], strict=True)
        }
        dcg = sum(gain[d] / math.log2(ranks[(row["query_id"], d)] + 1)
                  for d in row["candidates"] if ranks[(row["query_id"], d)] <= 10)  # fmt: skip
        ideal = sorted(gain.values(), reverse=True)[:10]
        expected.append(dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal)))
    assert result.ndcg == pytest.approx(expected, abs=1e-12)
    # pool order (ties by column, the old rule) gives other values on this run
    matrix = np.stack([scores[r["query_id"]] for r in queries])
    pool_order = ndcg_at_k(matrix, bench.ratings(), 10)
    assert np.abs(pool_order - np.array(expected)).max() > 0.05
    share = [tied_top_share(scores[r["query_id"]]) for r in queries]
    assert result.tied_top10.tolist() == share and result.tied_top10_share == np.mean(share)
    assert result.tied_top10_share == 1.0  # 25 candidates on 4 score values: every score tied


def test_tied_top_share_by_hand():
    assert tied_top_share(np.array([3.0, 2.0, 2.0, 1.0]), k=3) == pytest.approx(2 / 3)
    assert tied_top_share(np.array([3.0, 2.0, 1.0, 1.0]), k=3) == pytest.approx(1 / 3)
    assert tied_top_share(np.array([3.0, 2.0, 1.0, 0.0]), k=3) == 0.0
    assert tied_top_share(np.array([1.0, 1.0]), k=10) == 1.0  # fewer than k candidates
    assert tied_top_share(np.zeros(0)) == 0.0
