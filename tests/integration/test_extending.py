"""The recipes of docs/extending.md followed literally."""

from dataclasses import dataclass

import numpy as np
import pytest
from test_eval_data import write_tiny_benchmark

from saber_eval.benchmark import MAIN_SETTING
from saber_eval.engines.base import EngineError, Retriever, Task, batched, parse_options
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import ENGINES, retriever_factory
from saber_eval.runner import evaluate_specs


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
