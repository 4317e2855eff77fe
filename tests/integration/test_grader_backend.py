"""``yesno:build`` / ``llm:build``: a build's pointwise judge grading with the build's own LLM
(its backend, judge mode and token budget), all requests in one dispatch; anywhere else an
error naming the fix."""

import pytest
from fakes import ScriptedBackend

from saber_assets.triage import build_llm_factory, grader_inputs, grades_with_build_llm
from saber_compute.llm.interface import LLMResult
from saber_config import load_build_config
from saber_eval.engines.base import Task
from saber_eval.engines.llm import llm_backend_for_profile
from saber_eval.retrievers import make_retriever
from saber_store.database import DuckDBStore


class RecordingDispatch:
    """A dispatch that answers through the backend and records each batch it was sent."""

    def __init__(self, backend) -> None:
        self.backend, self.batches = backend, []

    def __call__(self, requests):
        self.batches.append(len(requests))
        return self.backend.generate(list(requests))


def test_only_llm_scorers_of_the_profile_build_use_the_builds_llm():
    assert grades_with_build_llm("yesno:build") and grades_with_build_llm("llm:build")
    assert not grades_with_build_llm("yesno:local-llm")
    assert not grades_with_build_llm("st:minilm")
    assert "llm" not in grader_inputs("st:minilm", None)
    assert grader_inputs("", None) == {"grader": "", "entry": None}


def test_the_factory_gives_the_builds_backend_and_judge_mode(tmp_path):
    plan = load_build_config("local-llm", home=str(tmp_path), judge_max_tokens=77).reads()
    llm = ScriptedBackend()
    factory = build_llm_factory(plan, llm)
    backend, options = factory("build", "")
    assert backend is llm and options == {"choice": True, "max_tokens": 77}  # local-llm: choice
    with pytest.raises(ValueError, match="llm_backend='vllm' does not apply"):
        factory("build", "vllm")
    with pytest.raises(ValueError, match="is a build's own LLM"):
        llm_backend_for_profile("build")


def test_a_dispatched_grader_sends_every_task_in_one_batch_and_counts_each_call_once(tmp_path):
    class YesFirst(ScriptedBackend):
        def generate(self, requests):
            return [
                LLMResult(text="yes", choice_logprobs={"yes": -0.1 * i, "no": -1.0})
                for i, _ in enumerate(requests)
            ]

    backend = YesFirst()
    dispatch = RecordingDispatch(backend)
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    grader = make_retriever(
        "yesno:build", backend=backend, llm_store=store, dispatch=dispatch, run_id="run-1"
    )
    tasks = [Task("q1", "query one", ("a", "b")), Task("q2", "query two", ("c", "d", "e"))]
    grader.prepare(tasks)
    scores = [grader.score(t)[0] for t in tasks]
    assert dispatch.batches == [5]  # one batch for both queries, nothing asked per query
    assert [len(s) for s in scores] == [2, 3] and all(((s > 0) & (s < 1)).all() for s in scores)
    assert grader.finish()["llm_calls"] == 5 and grader.finish()["llm_hits"] == 0
