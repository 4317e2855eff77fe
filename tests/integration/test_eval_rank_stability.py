"""The rank-stability table's adjacent-pair tests: raw paired p, Holm-adjusted p over the pairs
of one setting and metric, and the ``significant`` flag decided on the adjusted p — in
``rank_stability.csv``, ``.md`` and the DuckDB table. Per-query values are written by hand so
that one pair is significant on its raw p (0.028) and not after Holm's correction (0.056)."""

import itertools
import json

import duckdb
import numpy as np
import polars as pl
import pytest

from saber_eval.leaderboard import refresh_leaderboard
from saber_eval.registry import load_registry
from saber_eval.runner import retriever_slug
from saber_eval.significance import randomization_test
from saber_eval.stability import BootstrapSettings

SPECS = ["fixed:a", "fixed:b", "fixed:c", "fixed:d"]  # the observed order, best first
N_PERMUTATIONS, SEED, ALPHA = 2000, 0, 0.05


def system_values() -> dict[str, np.ndarray]:
    """Four systems over 30 queries, each a noisy step above the next (seed chosen so the raw
    p-values of the three adjacent pairs are ≈ 0.028, 0.003 and 0.13)."""
    rng = np.random.default_rng(16)
    noise = rng.standard_normal((3, 30)) * 0.2
    d = np.full(30, 0.5)
    c = d + 0.01 + noise[2]
    b = c + 0.08 + noise[1]
    a = b + 0.08 + noise[0]
    return dict(zip(SPECS, (a, b, c, d), strict=True))


def write_runs(folder, values: dict[str, np.ndarray]) -> None:
    """Per-query CSVs (``ndcg@10``; ``ndcg@10_trec`` = 0.9 × it) and minimal run summaries."""
    for spec, v in values.items():
        run = folder / "runs" / retriever_slug(spec)
        run.mkdir(parents=True)
        ids = [f"q{i:02d}" for i in range(len(v))]
        pl.DataFrame({"query_id": ids, "ndcg@10": v, "ndcg@10_trec": 0.9 * v}).write_csv(
            run / "statement-full.per_query.csv"
        )
        summary = {
            "spec": spec,
            "setting": "statement-full",
            "ndcg@10": float(v.mean()),
            "ndcg@10_trec": float(0.9 * v.mean()),
            "per_domain": {"Algebra": float(v.mean())},
            "median_latency_s": 0.001,
            "n_queries": len(v),
            "benchmark_hash": "0" * 16,
        }
        (run / "statement-full.json").write_text(json.dumps(summary))


def holm_by_formula(p: list[float]) -> list[float]:
    """adj_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)) over the ascending order."""
    m, ranked = len(p), sorted(range(len(p)), key=lambda k: p[k])
    out = [0.0] * m
    for i in range(m):
        out[ranked[i]] = max(min(1.0, (m - j) * p[ranked[j]]) for j in range(i + 1))
    return out


@pytest.fixture
def board(tmp_path):
    values = system_values()
    write_runs(tmp_path, values)
    settings = BootstrapSettings(n_resamples=500, seed=SEED, n_permutations=N_PERMUTATIONS)
    refresh_leaderboard(tmp_path, load_registry(), plots=False, bootstrap=settings)
    return tmp_path, values


def test_holm_is_applied_per_setting_and_metric_and_decides_significance(board):
    folder, values = board
    table = pl.read_csv(folder / "rank_stability.csv")
    assert table.height == 6  # two metrics × three adjacent pairs
    raw = [
        randomization_test(values[a], values[b], N_PERMUTATIONS, SEED)
        for a, b in itertools.pairwise(SPECS)
    ]
    adjusted = holm_by_formula(raw)  # a family of 3, not of all 6 tests
    for metric in ("ndcg@10", "ndcg@10_trec"):
        rows = table.filter(pl.col("metric") == metric).sort("rank")
        assert rows["spec"].to_list() == SPECS[:3] and rows["next_spec"].to_list() == SPECS[1:]
        assert rows["p_value"].to_list() == pytest.approx(raw, abs=1e-12)
        assert rows["p_holm"].to_list() == pytest.approx(adjusted, abs=1e-12)
        assert rows["n_tests"].to_list() == [3, 3, 3]
        assert rows["significant"].to_list() == [p <= ALPHA for p in adjusted]
    # the case the correction exists for: significant raw, not after Holm
    assert raw[0] <= ALPHA < adjusted[0] and adjusted[1] <= ALPHA
    assert table.filter(pl.col("rank") == 1)["significant"].to_list() == [False, False]


def test_markdown_and_duckdb_show_raw_and_adjusted_p(board):
    folder, _ = board
    table = pl.read_csv(folder / "rank_stability.csv").sort("metric", "rank")
    markdown = (folder / "rank_stability.md").read_text()
    assert "| paired p (raw) | Holm p | significant (Holm p ≤ 0.05) |" in markdown
    first = table.row(0, named=True)
    assert f"| {first['p_value']:.4g} | {first['p_holm']:.4g} | no |" in markdown
    second = table.row(1, named=True)
    assert f"| {second['p_value']:.4g} | {second['p_holm']:.4g} | yes |" in markdown
    con = duckdb.connect(str(folder / "leaderboard.duckdb"), read_only=True)
    try:
        stored = con.execute(
            "SELECT metric, rank, p_value, p_holm, n_tests, significant FROM rank_stability "
            "ORDER BY metric, rank"
        ).fetchall()
    finally:
        con.close()
    expected = table.select("metric", "rank", "p_value", "p_holm", "n_tests", "significant")
    assert stored == expected.rows()
