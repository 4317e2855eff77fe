"""The vLLM engine without vLLM: request building, grouping, output conversion, a fake engine
(the real engine: tests/vllm/)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from saber_compute.llm import vllm_offline as vllm_backend
from saber_compute.llm.interface import ChatMessage, LLMRequest
from saber_compute.llm.model_folder import (
    CHAT_TEMPLATE_FILE,
    GEMMA3_CHAT_TEMPLATE,
    PLAIN_CHAT_TEMPLATE,
    ensure_chat_template,
)
from saber_compute.llm.vllm_offline import (
    VLLM_VERSION,
    VLLMEngine,
    chat_messages,
    group_requests,
    result_from_output,
    sampling_kwargs,
)
from saber_llm.base import forget_engines
from saber_llm.vllm_backend import VLLMBackend


def _req(text: str, **kwargs) -> LLMRequest:
    return LLMRequest(
        messages=(ChatMessage("system", "Be brief."), ChatMessage("user", text)),
        prompt_id="judge",
        prompt_hash="p" * 8,
        input_hash=f"in-{text}",
        **kwargs,
    )


def _lp(logprob: float, token: str) -> SimpleNamespace:
    return SimpleNamespace(logprob=logprob, rank=1, decoded_token=token)


def _output(
    text: str, request_id: str = "0", logprobs=None, n_prompt: int = 9, token_ids=None, cached=None
):
    token_ids = token_ids if token_ids is not None else [7] * len(text)
    completion = SimpleNamespace(
        text=text, token_ids=token_ids, logprobs=logprobs, finish_reason="stop"
    )
    return SimpleNamespace(
        request_id=request_id,
        prompt_token_ids=list(range(n_prompt)),
        outputs=[completion],
        num_cached_tokens=cached,
    )


def test_import_does_not_import_vllm():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'vllm' or name.startswith('vllm.'):\n"
        "            raise ImportError('vllm imported at module import time')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import saber_llm.vllm_backend as m\n"
        "assert 'vllm' not in sys.modules\n"
        "print(m.VLLMBackend(model='x').identity()['backend'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "vllm"


def test_sampling_kwargs_and_messages():
    plain = _req("hello", max_tokens=64, temperature=0.7, top_p=0.95, seed=3)
    assert sampling_kwargs(plain) == {
        "max_tokens": 64,
        "temperature": 0.7,
        "top_p": 0.95,
        "seed": 3,
    }
    judged = _req("which?", choices=("1", "2"), logprobs=True)
    kwargs = sampling_kwargs(judged, top_logprobs=8)
    assert kwargs["logprobs"] == 8
    assert kwargs["structured_outputs"] == {"choice": ["1", "2"]}
    assert (kwargs["max_tokens"], kwargs["temperature"], kwargs["seed"]) == (256, 0.0, 0)
    assert chat_messages(judged) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "which?"},
    ]


def test_grouping_preserves_order():
    requests = [
        _req("a"),
        _req("b", choices=("1", "2"), logprobs=True),
        _req("c"),
        _req("d", seed=1),
        _req("e", choices=("1", "2"), logprobs=True),
        _req("f", choices=("2", "1"), logprobs=True),
    ]
    groups = group_requests(requests)
    assert [indices for _, indices in groups] == [[0, 2], [1, 4], [3], [5]]
    assert groups[2][0]["seed"] == 1
    assert groups[3][0]["structured_outputs"] == {"choice": ["2", "1"]}


def test_result_from_output_text_tokens_and_choice_logprobs():
    request = _req("q", choices=("1", "2", "3"), logprobs=True)
    first = {11: _lp(-0.1, "1"), 12: _lp(-2.5, " 2"), 13: _lp(-3.0, "2"), 14: _lp(-7.0, "x")}
    steps = [first, {15: _lp(0.0, "")}]
    output = _output("1", "42", logprobs=steps, token_ids=[11, 15], cached=6)
    result = result_from_output(output, request)
    assert result.text == "1"
    assert result.extra["cached_tokens"] == 6
    assert result.response_id == "vllm-42"
    assert (result.prompt_tokens, result.completion_tokens) == (9, 2)
    assert result.error is None
    assert result.extra["finish_reason"] == "stop"
    assert result.choice_logprobs["1"] == pytest.approx(-0.1)
    assert result.choice_logprobs["2"] == pytest.approx(math.log(math.exp(-2.5) + math.exp(-3.0)))
    assert "3" not in result.choice_logprobs  # not in the top-k: omitted


def test_result_from_output_without_logprobs_or_completion():
    plain = result_from_output(_output("an idea"), _req("q"))
    assert plain.text == "an idea" and plain.choice_logprobs is None
    assert plain.completion_tokens == len("an idea")
    assert "cached_tokens" not in plain.extra  # the engine did not say
    no_lp = result_from_output(_output("1"), _req("q", choices=("1", "2"), logprobs=True))
    assert no_lp.choice_logprobs is None
    empty = result_from_output(SimpleNamespace(request_id="1", outputs=[]), _req("q"))
    assert empty.error is not None and empty.text == ""


def test_generate_without_vllm_names_make_vllm_env(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError, even if installed
    with pytest.raises(ImportError, match="make vllm-env"):
        VLLMEngine(model="m").generate([_req("a")])


def test_identity_and_engine_kwargs(tmp_path):
    backend = VLLMBackend(model="org/m", tensor_parallel_size=2, max_model_len=4096)
    assert backend.identity() == {
        "backend": "vllm",
        "engine_version": VLLM_VERSION,
        "model": "org/m",
        "tensor_parallel_size": "2",
    }
    assert backend.engine().engine_kwargs() == {
        "model": "org/m",
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": True,
        "dtype": "auto",
        "enforce_eager": False,
        "seed": 0,
        "disable_log_stats": False,
        "max_model_len": 4096,
    }
    assert "download_dir" not in backend.engine().engine_kwargs()
    # a local folder: its content hash is part of the identity (a changed file, another hash)
    (tmp_path / "config.json").write_text("{}")
    first = VLLMBackend(model=str(tmp_path)).identity()["model_hash"]
    (tmp_path / "config.json").write_text('{"x": 1}')
    assert VLLMBackend(model=str(tmp_path)).identity()["model_hash"] != first
    assert VLLMBackend(model="m", reasoning_effort="low").identity()["reasoning_effort"] == "low"


# -- the full generate path against a fake ``vllm`` module -----------------------------------


class FakeState:
    def __init__(self) -> None:
        self.inits: list[dict] = []
        self.chats: list[dict] = []


@pytest.fixture
def fake_vllm(monkeypatch):
    """A ``vllm`` module whose LLM answers ``ans:<user text>`` and records every call."""
    state = FakeState()

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class StructuredOutputsParams:
        def __init__(self, choice=None):
            self.choice = choice

    class Tokenizer:
        def apply_chat_template(
            self, messages, tokenize=False, add_generation_prompt=True, chat_template=None
        ):
            return " ".join(m["content"] for m in messages)

        def encode(self, text, add_special_tokens=False):
            return text.split()

    class LLM:
        def __init__(self, **kwargs):
            state.inits.append(kwargs)
            self.counter = 0
            limit = kwargs.get("max_model_len", 10_000)
            self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(max_model_len=limit))

        def get_tokenizer(self):
            return Tokenizer()

        def get_metrics(self):
            return []

        def chat(
            self,
            messages,
            sampling_params=None,
            use_tqdm=True,
            chat_template=None,
            chat_template_kwargs=None,
        ):
            state.chats.append(
                {
                    "messages": messages,
                    "params": sampling_params,
                    "use_tqdm": use_tqdm,
                    "template": chat_template_kwargs,
                    "chat_template": chat_template,
                }
            )
            outputs = []
            for conversation in messages:
                user = conversation[-1]["content"]
                if user == "too-long":
                    raise ValueError("prompt longer than max_model_len")
                logprobs = None
                if sampling_params.kwargs.get("logprobs"):
                    logprobs = [{1: _lp(-0.3, "1"), 2: _lp(-1.4, "2")}]
                token_ids = [1] if logprobs else None
                outputs.append(_output(f"ans:{user}", str(self.counter), logprobs, 9, token_ids))
                self.counter += 1
            return outputs

    module = types.ModuleType("vllm")
    module.__version__ = VLLM_VERSION
    module.LLM = LLM
    module.SamplingParams = SamplingParams
    sp_module = types.ModuleType("vllm.sampling_params")
    sp_module.SamplingParams = SamplingParams
    sp_module.StructuredOutputsParams = StructuredOutputsParams
    module.sampling_params = sp_module
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp_module)
    vllm_backend.clear_engine_cache()
    forget_engines()
    yield state
    vllm_backend.clear_engine_cache()
    forget_engines()


def test_generate_end_to_end_with_fake_vllm(fake_vllm):
    backend = VLLMEngine(model="org/m", tensor_parallel_size=2, download_dir="/w")
    requests = [
        _req("a"),
        _req("b", choices=("1", "2"), logprobs=True),
        _req("c"),
        _req("d", choices=("1", "2"), logprobs=True),
        _req("e", temperature=0.5, seed=9),
    ]
    results = backend.generate(requests)
    assert [r.text for r in results] == ["ans:a", "ans:b", "ans:c", "ans:d", "ans:e"]
    assert all(r.error is None for r in results)
    assert results[1].choice_logprobs == {"1": -0.3, "2": -1.4}
    assert results[0].choice_logprobs is None
    assert len(fake_vllm.chats) == 3  # one batch per distinct sampling params
    batches = [[c[-1]["content"] for c in chat["messages"]] for chat in fake_vllm.chats]
    assert batches == [["a", "c"], ["b", "d"], ["e"]]
    guided = fake_vllm.chats[1]["params"].kwargs
    assert guided["structured_outputs"].choice == ["1", "2"]
    assert guided["logprobs"] == 5
    assert fake_vllm.chats[2]["params"].kwargs["seed"] == 9
    assert fake_vllm.chats[0]["use_tqdm"] is False
    assert fake_vllm.chats[0]["template"] is None
    assert fake_vllm.inits == [
        {
            "model": "org/m",
            "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": True,
            "dtype": "auto",
            "enforce_eager": False,
            "seed": 0,
            "disable_log_stats": False,
            "download_dir": "/w",
        }
    ]


def test_engine_built_once_per_config(fake_vllm):
    VLLMEngine(model="org/m").generate([_req("a")])
    VLLMEngine(model="org/m").generate([_req("b")])
    assert len(fake_vllm.inits) == 1
    VLLMEngine(model="org/m", max_model_len=2048).generate([_req("c")])
    assert len(fake_vllm.inits) == 2
    assert fake_vllm.inits[1]["max_model_len"] == 2048
    assert VLLMEngine(model="org/m").generate([]) == []


def test_wrong_vllm_version_names_the_fix(fake_vllm):
    with pytest.raises(RuntimeError, match="make vllm-env"):
        VLLMEngine(model="org/m", version="0.0.1").load()


def test_missing_model_folder_is_one_line_naming_the_setting(fake_vllm, tmp_path):
    with pytest.raises(FileNotFoundError, match="SABER_LLM_MODEL") as caught:
        VLLMEngine(model=str(tmp_path / "nope")).load()
    assert "\n" not in str(caught.value)
    assert fake_vllm.inits == []  # nothing built


def test_prompt_over_max_model_len_is_an_error_result_and_not_sent(fake_vllm):
    long = _req(" ".join(["w"] * 40))
    results = VLLMEngine(model="org/m", max_model_len=32).generate([_req("a"), long])
    assert results[0].error is None
    assert "does not fit max_model_len 32" in results[1].error
    assert "SABER_LLM_MAX_MODEL_LEN" in results[1].error
    assert [c[-1]["content"] for c in fake_vllm.chats[0]["messages"]] == ["a"]


def test_plain_chat_template_is_sent_and_named_in_the_identity(fake_vllm):
    VLLMEngine(model="org/m", chat_template="plain").generate([_req("a")])
    assert fake_vllm.chats[0]["chat_template"] == PLAIN_CHAT_TEMPLATE
    assert fake_vllm.chats[0]["template"] is None
    plain = VLLMEngine(model="org/m", chat_template="plain").identity()["chat_template"]
    assert plain != VLLMEngine(model="org/m", chat_template="gemma3").identity()["chat_template"]
    assert "chat_template" not in VLLMEngine(model="org/m").identity()


def test_plain_template_renders_what_the_embedded_engine_feeds_the_model():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from saber_compute.llm.embedded import render_plain

    request = _req(" Which one? ")
    template = ImmutableSandboxedEnvironment().from_string(PLAIN_CHAT_TEMPLATE)
    for content in (lambda m: m.content, lambda m: [{"type": "text", "text": m.content}]):
        messages = [{"role": m.role, "content": content(m)} for m in request.messages]
        rendered = template.render(messages=messages, bos_token="<bos>", add_generation_prompt=True)
        assert rendered == "<bos>" + render_plain(request.messages)
    assert render_plain(request.messages) == "Be brief.\n\nWhich one?"


def test_reasoning_effort_goes_to_chat_template(fake_vllm):
    VLLMEngine(model="openai/gpt-oss-20b", reasoning_effort="high").generate([_req("a")])
    assert fake_vllm.chats[0]["template"] == {"reasoning_effort": "high"}


def test_failing_prompt_is_isolated_in_its_batch(fake_vllm):
    results = VLLMEngine(model="org/m").generate([_req("a"), _req("too-long"), _req("c")])
    assert [r.text for r in results] == ["ans:a", "", "ans:c"]
    assert results[0].error is None and results[2].error is None
    assert "max_model_len" in results[1].error


def test_a_round_goes_to_vllm_in_prefix_order_one_chat_per_sampling_group(fake_vllm):
    """A judge round's requests, queries interleaved as a call can deliver them, reach
    ``LLM.chat`` grouped by shared prefix (query first) in one batch; results keep the callers'
    order."""
    rounds = [("q2", "a", "b"), ("q1", "c", "d"), ("q2", "e", "f"), ("q1", "a", "c")]
    pairs = rounds + [(q, b, a) for q, a, b in rounds]  # both orders
    requests = [
        _req(f"query {q} | 1: {a} | 2: {b}", choices=("1", "2"), logprobs=True) for q, a, b in pairs
    ]
    results = VLLMEngine(model="org/m").generate(requests)
    assert len(fake_vllm.chats) == 1
    sent = [c[-1]["content"] for c in fake_vllm.chats[0]["messages"]]
    assert sent == sorted(sent)  # prefix order
    assert [s.split(" |")[0] for s in sent] == ["query q1"] * 4 + ["query q2"] * 4
    assert [r.text for r in results] == [f"ans:{r.messages[-1].content}" for r in requests]


@pytest.mark.gpu
def test_tiny_batch_on_real_vllm_through_the_llm_server(tmp_path):
    """Real vLLM (GPU extra, a CUDA GPU and a small chat model in the local Hugging Face cache:
    ``SABER_VLLM_TEST_MODEL``, default Qwen/Qwen2.5-0.5B-Instruct): the LLM server loads it once
    and answers a shard of judge choices and a free generation."""
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    model = os.environ.get("SABER_VLLM_TEST_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    if not Path(model).exists():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(model, "config.json"), str):
            pytest.skip(f"{model} is not in the local Hugging Face cache")
    import json

    import pyarrow.parquet as pq

    from saber_compute.llm_server import LLMServer
    from saber_compute.llm_shard import (
        RESULTS,
        payload_version,
        requests_to_table,
        table_to_results,
    )
    from saber_llm.base import backend_spec

    backend = VLLMBackend(model=model, max_model_len=2048, gpu_memory_utilization=0.5)
    question = "Query: solve x+{}=3. Which candidate helps more, 1 or 2?"
    requests = [
        _req(question.format(i), choices=("1", "2"), logprobs=True, max_tokens=1) for i in range(4)
    ]
    requests.append(_req("Summarize in five words: induction works for all n.", max_tokens=16))
    alloc, shards = tmp_path / "alloc", tmp_path / "shards"
    (alloc / "inbox").mkdir(parents=True)
    (shards / "k").mkdir(parents=True)
    spec, config = backend_spec(backend)
    server_json = {"backend_spec": spec, "backend_config": config, "idle_timeout": 0.5}
    (alloc / "server.json").write_text(
        json.dumps({**server_json, "payload_version": payload_version()})
    )
    pq.write_table(requests_to_table(requests), shards / "k" / "requests.parquet")
    (alloc / "inbox" / "0-000001-k").touch()
    server = LLMServer(alloc, shards, print)
    assert server.serve() == "idle"
    results = table_to_results(pq.read_table(shards / "k" / RESULTS))
    assert all(r.error is None for r in results)
    assert all(r.text.strip() in ("1", "2") for r in results[:4])
    assert all(r.choice_logprobs for r in results[:4])
    assert results[4].text.strip() and results[4].completion_tokens <= 16
    status = json.loads(next((alloc / "jobs").glob("*.json")).read_text())
    assert status["model_loads"] == 1 and status["identity"]["backend"] == "vllm"


# -- the converted Gemma 3 folder's chat template ----------------------------------------------


def _gemma_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))
    return path


def test_gemma3_chat_template_renders_string_and_part_contents(tmp_path):
    """vLLM passes message contents as lists of parts ("openai" format), transformers as strings:
    both render to Gemma 3's turns, the system message folded into the first user turn."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    folder = _gemma_folder(tmp_path / "m")
    assert ensure_chat_template(folder) is True
    template = ImmutableSandboxedEnvironment().from_string(
        (folder / CHAT_TEMPLATE_FILE).read_text()
    )
    expected = (
        "<bos><start_of_turn>user\nBe brief.\n\nWhich one?<end_of_turn>\n<start_of_turn>model\n"
    )
    for system, user in (
        (" Be brief. ", "Which one? "),
        ([{"type": "text", "text": "Be brief."}], [{"type": "text", "text": "Which one?"}]),
    ):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        assert (
            template.render(messages=messages, bos_token="<bos>", add_generation_prompt=True)
            == expected
        )
    assert ensure_chat_template(folder) is False  # written once


def test_chat_template_keeps_a_folder_s_own_and_skips_other_models(tmp_path):
    own = _gemma_folder(tmp_path / "own")
    (own / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert ensure_chat_template(own) is False and not (own / CHAT_TEMPLATE_FILE).exists()
    other = tmp_path / "llama"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert ensure_chat_template(other) is False
    older = _gemma_folder(tmp_path / "older")  # this module's earlier template is replaced
    (older / CHAT_TEMPLATE_FILE).write_text("Gemma 3 turns must alternate user/assistant, old")
    assert ensure_chat_template(older) is True
    assert (older / CHAT_TEMPLATE_FILE).read_text() == GEMMA3_CHAT_TEMPLATE
