"""The ``retriever_runs`` and ``leaderboard`` assets on a tiny export folder (dg.materialize)."""

import dagster as dg
import polars as pl
import pytest
from test_eval_data import QUERIES, write_tiny_benchmark

from saber_assets.evaluation import DEFAULT_RETRIEVERS, leaderboard, retriever_runs
from saber_resources.config import load_build_config
from saber_resources.slurm import SlurmDispatch
from saber_resources.store.database import DuckDBStore


def materialize(build, store, run_config=None) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [retriever_runs, leaderboard],
        resources={"build": build, "store": store, "slurm": SlurmDispatch()},
        run_config=run_config,
        instance=dg.DagsterInstance.ephemeral(),
    )


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    events = result.asset_materializations_for_node(asset)
    return events[-1].metadata


def test_assets_evaluate_the_export_and_build_the_leaderboard(tmp_path):
    build = load_build_config("tiny", home=str(tmp_path / "home"))
    write_tiny_benchmark(build.export_dir)  # an export folder written by someone else
    store = DuckDBStore(database=str(build.database_path))

    result = materialize(build, store)
    assert result.success
    runs = store.read_table("retriever_runs")
    assert runs.columns == [
        "retriever",
        "setting",
        "query_id",
        "domain",
        "ndcg@10",
        "ndcg@10_trec",
        "tied_top10",
        "latency_s",
    ]
    assert runs.height == len(DEFAULT_RETRIEVERS) * len(QUERIES)
    assert set(runs["setting"]) == {"statement-full"}
    board = store.read_table("leaderboard")
    assert sorted(board["spec"]) == sorted(DEFAULT_RETRIEVERS)
    means = runs.group_by("retriever").agg(pl.col("ndcg@10").mean())
    for spec, mean in means.rows():
        assert board.filter(pl.col("spec") == spec)["ndcg@10"].item() == pytest.approx(mean)
    board_meta = metadata(result, "leaderboard")
    assert {"plot/quality_latency", "plot/per_domain", "plot/release_date"} <= set(board_meta)
    assert "data:image/png;base64," in board_meta["plot/quality_latency"].value
    folder = next((build.home_path / "eval").glob("export-*"))
    assert (folder / "leaderboard.csv").exists() and (folder / "leaderboard.md").exists()
    assert (folder / "runs" / "bm25" / "statement-full.trec").exists()
    assert (build.home_path / "mlruns").exists()
    assert (build.home_path / "cache" / "eval_cache.duckdb").exists()  # MiniLM vectors

    again = materialize(build, store)  # nothing changed: both assets reuse their tables
    assert metadata(again, "retriever_runs")["reused"].value is True
    assert metadata(again, "leaderboard")["reused"].value is True

    config = {
        "ops": {
            "retriever_runs": {
                "config": {
                    "retrievers": ["bm25", "jaccard"],
                    "settings": ["all"],
                    "mlflow": False,
                }
            },
            "leaderboard": {"config": {"mlflow": False}},
        }
    }
    third = materialize(build, store, config)
    assert metadata(third, "retriever_runs")["reused"].value is False
    assert store.read_table("retriever_runs").height == 2 * 3 * len(QUERIES)
    # the leaderboard holds every run stored for this export (the earlier ones included)
    board = store.read_table("leaderboard")
    assert board.height == len(DEFAULT_RETRIEVERS) + 2 * 2
    assert set(board["setting"]) == {"statement-statement", "statement-full", "full-full"}
