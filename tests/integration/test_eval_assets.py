"""The ``retriever_runs`` partitions and the ``leaderboard`` on a tiny export folder
(dg.materialize): one materialization per retriever, the leaderboard over every evaluated
partition, which partitions are evaluated, missing or stale, and reuse."""

import dagster as dg
import polars as pl
import pytest
from test_eval_data import QUERIES, write_tiny_benchmark

from saber_assets.evaluation import (
    DEFAULT_RETRIEVERS,
    RETRIEVERS,
    leaderboard,
    partition_tables,
    retriever_runs,
)
from saber_assets.resources import BuildResource, StoreResource
from saber_config import load_build_config
from saber_slurm import SlurmDispatch
from saber_store.database import DuckDBStore


class Evaluation:
    """One instance with the retriever partitions; materializes partitions and the board."""

    def __init__(self, build, store) -> None:
        self.build, self.store = build, store
        self.instance = dg.DagsterInstance.ephemeral()

    def run(self, spec: str | None, run_config=None) -> dg.ExecuteInProcessResult:
        if spec and spec not in self.instance.get_dynamic_partitions(RETRIEVERS.name):
            self.instance.add_dynamic_partitions(RETRIEVERS.name, [spec])
        return dg.materialize(
            [retriever_runs, leaderboard],
            resources={
                "build": BuildResource.of(self.build),
                "store": StoreResource.of(self.store),
                "slurm": SlurmDispatch(),
            },
            run_config=run_config,
            instance=self.instance,
            partition_key=spec,
            selection=[retriever_runs if spec else leaderboard],
        )


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    return result.asset_materializations_for_node(asset)[-1].metadata


def test_partitions_evaluate_the_export_and_the_leaderboard_lists_them(tmp_path):
    build = load_build_config("tiny", home=str(tmp_path / "home"))
    write_tiny_benchmark(build.export_dir)  # an export folder written by someone else
    store = DuckDBStore(database=str(build.database_path))
    ev = Evaluation(build, store)

    for spec in DEFAULT_RETRIEVERS:
        assert ev.run(spec).success
    ev.instance.add_dynamic_partitions(RETRIEVERS.name, ["st:not-evaluated-yet"])
    board_run = ev.run(None)
    assert board_run.success
    runs = store.read_table(partition_tables("bm25")[0])
    assert runs.columns == ["retriever", "setting", "query_id", "domain", "ndcg@10",
                            "ndcg@10_trec", "tied_top10", "latency_s"]  # fmt: skip
    assert runs.height == len(QUERIES) and set(runs["setting"]) == {"statement-full"}
    every = store.read_table("leaderboard_runs")
    assert every.height == len(DEFAULT_RETRIEVERS) * len(QUERIES)
    board = store.read_table("leaderboard")
    assert sorted(board["spec"]) == sorted(DEFAULT_RETRIEVERS)
    means = every.group_by("retriever").agg(pl.col("ndcg@10").mean())
    for spec, mean in means.rows():
        assert board.filter(pl.col("spec") == spec)["ndcg@10"].item() == pytest.approx(mean)
    status = dict(store.read_table("retrievers").select("spec", "status").rows())
    assert status == {**dict.fromkeys(DEFAULT_RETRIEVERS, "evaluated"),
                      "st:not-evaluated-yet": "missing"}  # fmt: skip
    board_meta = metadata(board_run, "leaderboard")
    assert board_meta["retrievers/missing"].value == 1
    assert {"plot/quality_latency", "plot/per_domain", "plot/release_date"} <= set(board_meta)
    folder = next((build.home_path / "eval").glob("export-*"))
    assert (folder / "leaderboard.csv").exists() and (folder / "leaderboard.md").exists()
    assert (folder / "runs" / "bm25" / "statement-full.trec").exists()
    assert (build.home_path / "mlruns").exists()
    assert build.eval_cache_path.exists()  # MiniLM vectors

    again = ev.run("bm25")  # nothing changed: the partition reuses its tables
    assert metadata(again, "retriever_runs")["reused"].value is True
    assert metadata(ev.run(None), "leaderboard")["reused"].value is True

    config = {"ops": {"retriever_runs": {"config": {"settings": ["all"], "mlflow": False}}}}
    third = ev.run("jaccard", config)
    assert metadata(third, "retriever_runs")["reused"].value is False
    assert store.read_table(partition_tables("jaccard")[0]).height == 3 * len(QUERIES)
    board = store.read_table("leaderboard")  # every run stored for this export
    fresh = ev.run(None, {"ops": {"leaderboard": {"config": {"mlflow": False}}}})
    assert metadata(fresh, "leaderboard")["reused"].value is False
    board = store.read_table("leaderboard")
    assert board.height == len(DEFAULT_RETRIEVERS) + 2
    assert set(board["setting"]) == {"statement-statement", "statement-full", "full-full"}


def test_a_partition_evaluated_with_another_registry_entry_is_stale(tmp_path, monkeypatch):
    build = load_build_config("tiny", home=str(tmp_path / "home"))
    write_tiny_benchmark(build.export_dir)
    store = DuckDBStore(database=str(build.database_path))
    ev = Evaluation(build, store)
    assert ev.run("random").success
    registry = tmp_path / "retrievers.yaml"
    registry.write_text("retrievers:\n  random:\n    display_name: Random (renamed)\n")
    monkeypatch.setattr("saber_eval.registry.REGISTRY_PATH", registry)
    ev.run(None)
    status = store.read_table("retrievers").row(0, named=True)
    assert (status["spec"], status["status"], status["why"]) == ("random", "stale", "entry changed")
