"""The recipes of docs/extending.md followed literally."""

import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import dagster as dg
import numpy as np
import polars as pl
import pytest
from test_eval_data import write_tiny_benchmark

from saber_assets.definitions import build_definitions, with_stage_versions
from saber_assets.resources import BuildResource, StoreResource
from saber_cli.build import run_build
from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_config import BuildPlan, load_build_config
from saber_eval.benchmark import MAIN_SETTING
from saber_eval.engines.base import EngineError, Retriever, Task, batched, parse_options
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import ENGINES, retriever_factory
from saber_eval.runner import evaluate_specs
from saber_llm.base import LLMBackend
from saber_llm.factory import BACKENDS, JUDGES
from saber_runtime.stage import StageOutput, materialize_stage
from saber_store.database import DuckDBStore


@dataclass(frozen=True)
class LengthOptions:
    """How much a character of shared prefix weighs."""

    weight: float = 1.0


class SharedWordsRetriever(Retriever):
    """A toy engine: score = weight · |words(q) ∩ words(d)|, candidates in batches."""

    engine = "shared-words"
    Options = LengthOptions

    def __init__(self, spec: str, weight: float, batch_size: int) -> None:
        self.spec, self.kind, self.weight, self.batch_size = spec, "single-pass", weight, batch_size
        self.batches = 0

    @classmethod
    def from_entry(cls, entry, ctx):
        return cls(entry.spec, parse_options(cls, entry).weight, entry.batch_size)

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        words = set(task.query.lower().split())
        out = []
        for batch in batched(task.documents, self.batch_size):
            self.batches += 1
            out += [self.weight * len(words & set(d.lower().split())) for d in batch]
        return np.asarray(out, dtype=np.float64), 0.0


def test_a_retriever_engine_registered_by_the_recipe_evaluates(tmp_path, monkeypatch):
    monkeypatch.setitem(ENGINES, SharedWordsRetriever.engine, SharedWordsRetriever)  # step 2
    registry_file = tmp_path / "mine.yaml"  # step 3
    registry_file.write_text(
        "retrievers:\n  my-model:\n    engine: shared-words\n    options: {weight: 2.0}\n"
        "    batch_size: 3\n"
    )
    benchmark = load_benchmark(write_tiny_benchmark(tmp_path / "bench"))
    registry = load_registry(registry_file)
    made = {}

    def make(spec):
        made[spec] = retriever_factory(None, registry=registry)(spec)
        return made[spec]

    (result,) = evaluate_specs(
        benchmark, ["my-model"], [MAIN_SETTING], tmp_path / "out", registry=registry, make=make
    )
    queries, docs = benchmark.texts(MAIN_SETTING)
    for query, candidates, scores in zip(queries, docs, result.scores, strict=True):
        words = set(query.lower().split())
        expected = [2.0 * len(words & set(d.lower().split())) for d in candidates]
        assert scores.tolist() == expected
    assert made["my-model"].batches == sum(-(-len(c) // 3) for c in docs)
    assert (tmp_path / "out" / "runs" / "my-model" / f"{MAIN_SETTING}.trec").exists()


def test_an_unregistered_engine_or_option_is_one_line_naming_it(tmp_path, monkeypatch):
    registry_file = tmp_path / "mine.yaml"
    registry_file.write_text("retrievers:\n  my-model:\n    engine: shared-words\n")
    make = retriever_factory(None, registry=load_registry(registry_file))
    with pytest.raises(EngineError, match=r"unknown engine 'shared-words'; known engines: .*bm25"):
        make("my-model")
    monkeypatch.setitem(ENGINES, SharedWordsRetriever.engine, SharedWordsRetriever)
    registry_file.write_text(
        "retrievers:\n  my-model:\n    engine: shared-words\n    options: {wieght: 2}\n"
    )
    make = retriever_factory(None, registry=load_registry(registry_file))
    with pytest.raises(EngineError, match=r"unknown option\(s\) \['wieght'\]; known: \['weight'\]"):
        make("my-model")


def test_the_schema_allows_exactly_the_registered_backends_and_judges(tmp_path):
    for name, cls in BACKENDS.items():
        assert cls.config_name == name
        assert load_build_config("tiny", home=str(tmp_path), llm_backend=name).llm.backend == name
    for name, cls in JUDGES.items():
        assert cls.config_name == name
        assert load_build_config("tiny", home=str(tmp_path), judge=name).tournament.judge == name
    with pytest.raises(ValueError, match=r"unknown name 'nope'; known: embedded, openai, vllm"):
        load_build_config("tiny", home=str(tmp_path), llm_backend="nope")
    with pytest.raises(ValueError, match=r"unknown name 'nope'; known: embedding, lexical, llm"):
        load_build_config("tiny", home=str(tmp_path), judge="nope")


# ----------------------------------------------------------------------------- a judge backend
USED: Counter = Counter()


class AlwaysFirstBackend(LLMBackend):
    """A toy LLM backend: the first candidate wins every judge request (the answer "1")."""

    config_name: ClassVar[str] = "always-first"
    answer: str = "1"

    @classmethod
    def from_plan(cls, plan: BuildPlan) -> "AlwaysFirstBackend":
        USED["from_plan"] += 1
        return cls(answer="1")

    def identity(self) -> dict[str, str]:
        return {"backend": "always-first", "model": "none"}

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        USED["requests"] += len(requests)
        return [LLMResult(text=self.answer, response_id=f"r{USED['requests']}") for _ in requests]

    def preflight(self) -> None:
        USED["preflight"] += 1


def test_a_judge_backend_registered_by_the_recipe_judges_a_build(tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, AlwaysFirstBackend.config_name, AlwaysFirstBackend)  # step 2
    USED.clear()
    build = load_build_config(  # step 3: the schema takes any registered name
        "tiny",
        home=str(tmp_path / "home"),
        llm_backend="always-first",
        judge="llm",
        presentation="pool_order",
    )
    assert run_build(build, dg.DagsterInstance.ephemeral()).success
    # the backend is made once, preflighted once, and asked every judge request
    assert (USED["from_plan"], USED["preflight"]) == (1, 1) and USED["requests"] > 0
    store = DuckDBStore(database=str(build.database_path))
    calls = store.read_table("llm_calls")  # every answer it gave, paid once
    assert calls.height == USED["requests"] and set(calls["text"]) == {"1"}
    assert set(calls["backend"]) == {"always-first"}
    judgments = store.read_table("judgments")  # the first candidate shown won every judgment
    assert set(judgments["raw"]) == {"1"} and (judgments["outcome"] == 1.0).all()
    assert set(judgments["judge_backend"]) == {"always-first"}


def test_an_unregistered_backend_is_one_line_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"llm.backend\n.*unknown name 'always-first'"):
        load_build_config("tiny", home=str(tmp_path), llm_backend="always-first")


# ----------------------------------------------------------------------------- an asset
@dg.asset(group_name="validity", deps=["bt_ratings"])
def rating_spread(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Every query's rating spread (and the pool size it was computed for)."""
    plan = build.reads()  # every setting read through it is fingerprinted
    pool_size = plan.pools.config.pool_size

    def compute() -> StageOutput:
        ratings = store.read_table("bt_ratings")  # a table of a dep
        spread = ratings.group_by("query_id").agg(pl.col("rating").std().alias("spread"))
        return StageOutput({"rating_spread": spread.with_columns(pool_size=pl.lit(pool_size))})

    return materialize_stage(context, store, plan, compute=compute)


def test_an_asset_added_by_the_recipe_materializes_and_is_reused(tiny_build, tmp_path):
    built, _, _ = tiny_build
    home = tmp_path / "home"
    shutil.copytree(built.home_path, home)
    build = load_build_config("tiny", home=str(home))
    defs = build_definitions(build)
    # step 2: the asset appended to the assets build_definitions versions and returns
    assets = with_stage_versions([*defs.assets, rating_spread], build.plan())
    store = DuckDBStore(database=str(build.database_path))

    def materialize() -> bool:
        result = dg.materialize(
            assets,
            selection=[rating_spread.key],
            resources=defs.resources,
            instance=dg.DagsterInstance.ephemeral(),
        )
        (event,) = result.asset_materializations_for_node("rating_spread")
        return event.metadata["reused"].value

    assert materialize() is False
    ratings = store.read_table("bt_ratings")
    expected = {
        q: float(np.std(ratings.filter(pl.col("query_id") == q)["rating"].to_numpy(), ddof=1))
        for q in ratings["query_id"].unique()
    }
    table = store.read_table("rating_spread")
    assert dict(zip(table["query_id"], table["spread"], strict=True)) == pytest.approx(expected)
    assert set(table["pool_size"]) == {build.plan().pools.config.pool_size}
    assert materialize() is True  # nothing it read changed: its stored table is reused
