"""The embedded backend for real: Gemma 3 270M on CPU on a few summary, topics and judge prompts."""

import math

import pytest
import torch
import transformers.generation.utils

from saber_compute.llm.embedded import STOP_STRINGS, render_plain, stopping_criteria
from saber_compute.llm.interface import LLMRequest
from saber_core.parsing import clean_summary, parse_judge_answer, parse_topics, render_shortlist
from saber_llm.embedded import EmbeddedBackend
from saber_llm.prompts import load_prompt

QUERY = "Find all primes p such that p^2 + 2 is also prime."
SOLUTION = "If p is not 3, then p^2 leaves remainder 1 modulo 3, so p^2 + 2 is divisible by 3."
NEAR = "Problem: Find all primes p such that p + 10 and p + 14 are prime.\n\nSolution: Work mod 3."
FAR = "Problem: How many ways can 5 rooks be placed on a 5x5 board?\n\nSolution: 5! = 120."
NODES = {"C_mod": "modular arithmetic", "C_prime": "prime numbers", "C_rook": "rook placements"}


@pytest.fixture(scope="module")
def backend():
    return EmbeddedBackend(batch_size=4).engine()


def test_judge_choice_scoring_gives_probabilities(backend):
    prompt = load_prompt("judge")
    requests = [
        LLMRequest(prompt.render(query=QUERY, candidate_1=a, candidate_2=b), prompt.label,
                   prompt.hash, f"pair{i}", max_tokens=1, choices=("1", "2"), logprobs=True)
        for i, (a, b) in enumerate([(NEAR, FAR), (FAR, NEAR)])
    ]  # fmt: skip
    results = backend.generate(requests)
    assert len(results) == 2
    for r in results:
        value, reason = parse_judge_answer(r.text)
        assert value in (1, 2) and reason == "boxed"
        assert set(r.choice_logprobs) == {"1", "2"}
        assert all(lp < 0 for lp in r.choice_logprobs.values())
        total = sum(math.exp(lp) for lp in r.choice_logprobs.values())
        assert 0 < total <= 1.0 + 1e-6
        assert r.text == f"\\boxed{{{max(r.choice_logprobs, key=r.choice_logprobs.get)}}}"
        assert r.prompt_tokens > 50


@pytest.mark.e2e
def test_summary_and_topics_generation_parse(backend):
    summary = load_prompt("summary")
    topics = load_prompt("topics")
    requests = [
        LLMRequest(summary.render(problem=QUERY, solution=SOLUTION), summary.label, summary.hash,
                   "s", max_tokens=24),
        LLMRequest(
            topics.render(problem=QUERY, solution=SOLUTION,
                          shortlist=render_shortlist(list(NODES), NODES), max_topics="3",
                          example_id="C_mod"),
            topics.label, topics.hash, "t", max_tokens=24),
    ]  # fmt: skip
    results = backend.generate(requests)
    assert [r.error for r in results] == [None, None]
    assert 0 < results[0].completion_tokens <= 24
    # whatever a 270M base model writes, parsing ends in a value or a stated reason
    text, status = clean_summary(results[0].text)
    assert (text is None) == (status.startswith("too short") or status == "empty answer")
    parsed = parse_topics(results[1].text, NODES)
    assert set(parsed.kept) <= set(NODES)
    assert parsed.reason
    # greedy decoding is deterministic
    again = backend.generate(requests[:1])
    assert again[0].text == results[0].text


def test_an_answer_never_depends_on_the_requests_sent_with_it():
    """The default engine (``batch_size`` 1): each log-prob equals, bit for bit, the one the
    request gets alone, whatever else is in the call and in which order (a resumed stage or
    another shard cut sends other subsets)."""
    engine = EmbeddedBackend().engine()
    prompt = load_prompt("judge")
    pairs = [(NEAR, FAR), (FAR, NEAR), (SOLUTION, QUERY)]
    requests = [
        LLMRequest(prompt.render(query=QUERY, candidate_1=a, candidate_2=b), prompt.label,
                   prompt.hash, f"alone{i}", max_tokens=1, choices=("1", "2"), logprobs=True)
        for i, (a, b) in enumerate(pairs)
    ]  # fmt: skip
    together = engine.generate(requests)
    reversed_ = engine.generate(requests[::-1])[::-1]
    alone = [engine.generate([r])[0] for r in requests]
    for a, b, c in zip(together, reversed_, alone, strict=True):
        assert a.choice_logprobs == b.choice_logprobs == c.choice_logprobs


def test_choice_scoring_projects_only_the_last_position(backend, monkeypatch):
    """Only the last position reaches the LM head, and the log-probs equal full logits' (to
    float32 rounding: the head's product over one position rounds unlike over all of them)."""
    tokenizer, model = backend._load()
    prompt = load_prompt("judge")
    requests = [
        LLMRequest(prompt.render(query=QUERY, candidate_1=a, candidate_2=b), prompt.label,
                   prompt.hash, f"last{i}", max_tokens=1, choices=("1", "2"), logprobs=True)
        for i, (a, b) in enumerate([(NEAR, FAR), (SOLUTION, QUERY)])
    ]  # fmt: skip
    encoded = backend._encode([render_plain(r.messages) + backend.answer_cue for r in requests])
    assert encoded["attention_mask"].sum(dim=1).unique().numel() == 2  # one row is left-padded
    with torch.no_grad():
        full = model(**encoded).logits
    assert full.shape[1] > 1
    reference = torch.log_softmax(full[:, -1, :].float(), dim=-1)

    shapes = []
    forward = model.forward

    def recording_forward(*args, **kwargs):
        output = forward(*args, **kwargs)
        shapes.append(tuple(output.logits.shape))
        return output

    monkeypatch.setattr(model, "forward", recording_forward)
    results = backend.generate(requests)
    assert shapes == [(2, 1, model.config.vocab_size)]
    for row, result in enumerate(results):
        expected = {
            c: float(reference[row, tokenizer.encode(c, add_special_tokens=False)[0]])
            for c in ("1", "2")
        }
        assert result.choice_logprobs == pytest.approx(expected, abs=1e-4)


@pytest.mark.e2e
def test_generation_reuses_the_stop_criterion_with_the_same_text(backend, monkeypatch):
    """Same greedy text as ``generate(stop_strings=...)``; the criterion is not rebuilt per call."""
    tokenizer, model = backend._load()
    summary = load_prompt("summary")
    request = LLMRequest(summary.render(problem=QUERY, solution=SOLUTION), summary.label,
                         summary.hash, "stop", max_tokens=24)  # fmt: skip
    encoded = backend._encode([render_plain(request.messages)])
    with torch.no_grad():
        output = model.generate(
            **encoded,
            max_new_tokens=24,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=tokenizer.pad_token_id,
            stop_strings=list(STOP_STRINGS),
            tokenizer=tokenizer,
        )
    expected = tokenizer.decode(
        output[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True
    )
    stopping_criteria(backend._cache_dir())  # built once (if no earlier test did), before the patch

    def rebuilt(*args, **kwargs):
        raise AssertionError("generate built a StopStringCriteria for this call")

    monkeypatch.setattr(transformers.generation.utils, "StopStringCriteria", rebuilt)
    assert backend.generate([request])[0].text == expected
