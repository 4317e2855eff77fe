"""OpenAICompatibleBackend against a chat-completions server started by the test on 127.0.0.1."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from saber_compute.llm.interface import ChatMessage, LLMRequest, parting_choice_logprobs
from saber_config import load_build_config
from saber_llm.base import backend_spec
from saber_llm.factory import make_backend
from saber_llm.openai_compat import (
    OpenAICompatibleBackend,
    backoff_seconds,
    parse_chat_completion,
    redact_url,
    retry_after_seconds,
)

KEY = "sk-test-0123456789abcdef"
TOP = [(" 1", -0.2), ("1", -2.0), ("2", -1.9), ("x", -6.0)]


class FakeServer(ThreadingHTTPServer):
    """Chat completions whose behaviour is chosen by the last user message.

    ``ok:X`` answers ``echo:X``; ``rate:N:X`` 429s (Retry-After: 0) N times then answers;
    ``flaky:X`` 500s once; ``down`` always 503s; ``malformed`` sends broken JSON; ``nochoices``
    sends JSON without choices; ``bad`` 400s with a body that echoes the Authorization header;
    ``slow:X`` sleeps 50 ms (tracking requests in flight); ``hang`` sleeps 0.5 s.
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.hits: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        with srv.lock:
            srv.hits[prompt] += 1
            hit = srv.hits[prompt]
            srv.bodies.append(body)
            srv.auth.append(self.headers.get("Authorization"))
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        self._counted = True
        try:
            self._respond(body, prompt, hit)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out first
        finally:
            self._leave()

    def _leave(self) -> None:
        """The request is no longer in flight — before its response is written: once the client
        has the answer its worker may send the next request before this thread runs on."""
        if getattr(self, "_counted", False):
            self._counted = False
            with self.server.lock:
                self.server.in_flight -= 1

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self._leave()
        self.wfile.write(payload)

    def _respond(self, body: dict, prompt: str, hit: int) -> None:
        if self.path != "/v1/chat/completions":
            return self._send(404, b'{"error": "not found"}')
        if prompt.startswith("rate:"):
            _, n, rest = prompt.split(":", 2)
            if hit <= int(n):
                return self._send(429, b'{"error": "slow down"}', {"Retry-After": "0"})
            prompt = f"ok:{rest}"
        if prompt.startswith("flaky:") and hit == 1:
            return self._send(500, b'{"error": "boom"}')
        if prompt == "down":
            return self._send(503, b'{"error": "unavailable"}')
        if prompt == "malformed":
            return self._send(200, b'{"id": "x", "choices": [{"message": ')
        if prompt == "nochoices":
            return self._send(200, json.dumps({"id": "x", "object": "chat.completion"}).encode())
        if prompt == "bad":
            echo = {
                "error": "bad request",
                "headers": {"authorization": self.headers["Authorization"]},
            }
            return self._send(400, json.dumps(echo).encode())
        if prompt.startswith("slow:"):
            time.sleep(0.05)
        if prompt == "hang":
            time.sleep(0.5)
        answer = prompt.split(":", 1)[-1]
        choice: dict = {
            "index": 0,
            "message": {"role": "assistant", "content": f"echo:{answer}"},
            "finish_reason": "stop",
        }
        if prompt.startswith("think:"):
            choice["message"]["reasoning_content"] = "let me think"
        if body.get("logprobs"):
            top = [{"token": t, "logprob": lp} for t, lp in TOP[: body["top_logprobs"]]]
            choice["logprobs"] = {
                "content": [{"token": " 1", "logprob": -0.2, "top_logprobs": top}]
            }
        response = {
            "id": f"chatcmpl-{answer}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [choice],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        }
        self._send(200, json.dumps(response).encode())


@pytest.fixture
def server():
    srv = FakeServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def _req(text: str, **kwargs) -> LLMRequest:
    return LLMRequest(
        messages=(ChatMessage("system", "You are terse."), ChatMessage("user", text)),
        prompt_id="judge",
        prompt_hash="p" * 8,
        input_hash=f"in-{text}",
        **kwargs,
    )


def _backend(server: FakeServer, **kwargs) -> OpenAICompatibleBackend:
    defaults = {"base_url": server.base_url, "model": "tiny", "api_key": KEY, "backoff_s": 0.01}
    return OpenAICompatibleBackend(**(defaults | kwargs))


def test_results_in_request_order_with_usage_and_ids(server):
    backend = _backend(server, max_concurrency=4)
    requests = [_req(f"ok:{i}") for i in range(10)]
    results = backend.generate(requests)
    assert [r.text for r in results] == [f"echo:{i}" for i in range(10)]
    assert [r.response_id for r in results] == [f"chatcmpl-{i}" for i in range(10)]
    assert all(r.error is None for r in results)
    assert all(r.prompt_tokens == 11 and r.completion_tokens == 3 for r in results)
    assert results[0].extra["finish_reason"] == "stop"
    assert backend.generate([]) == []


def test_request_body_fields(server):
    backend = _backend(server)
    backend.generate([_req("ok:a", max_tokens=7, temperature=0.3, top_p=0.9, seed=42)])
    (body,) = server.bodies
    assert body["model"] == "tiny"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "ok:a"},
    ]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (
        7,
        0.3,
        0.9,
        42,
    )
    assert "logprobs" not in body and "structured_outputs" not in body
    assert "reasoning_effort" not in body


def test_guided_choice_and_logprobs_in_body(server):
    backend = _backend(server, reasoning_effort="low")
    backend.generate([_req("ok:a", choices=("1", "2"), logprobs=True)])
    body = server.bodies[-1]
    assert body["structured_outputs"] == {"choice": ["1", "2"]}
    assert "guided_choice" not in body
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert body["reasoning_effort"] == "low"

    _backend(server, guided_choice_format="guided_choice").generate([_req("ok:b", choices=("A",))])
    assert server.bodies[-1]["guided_choice"] == ["A"]
    assert "structured_outputs" not in server.bodies[-1]

    _backend(server, guided_choice=False).generate([_req("ok:c", choices=("A",))])
    assert "guided_choice" not in server.bodies[-1]
    assert "structured_outputs" not in server.bodies[-1]


def test_choice_logprobs_parsed(server):
    backend = _backend(server)
    (result,) = backend.generate([_req("ok:j", choices=("1", "2", "3"), logprobs=True)])
    assert result.error is None
    assert set(result.choice_logprobs) == {"1", "2"}  # "3" is not in the top-k: omitted
    assert result.choice_logprobs["1"] == pytest.approx(math.log(math.exp(-0.2) + math.exp(-2.0)))
    assert result.choice_logprobs["2"] == pytest.approx(-1.9)
    (plain,) = backend.generate([_req("ok:k", choices=("1", "2"))])
    assert plain.choice_logprobs is None  # logprobs not asked for


def test_reasoning_content_goes_to_extra(server):
    (result,) = _backend(server).generate([_req("think:x")])
    assert result.text == "echo:x"
    assert result.extra["reasoning"] == "let me think"


def test_429_and_500_are_retried_until_success(server):
    backend = _backend(server, max_retries=4, max_concurrency=2)
    results = backend.generate([_req("rate:2:a"), _req("flaky:b"), _req("ok:c")])
    assert [r.text for r in results] == ["echo:a", "echo:b", "echo:c"]
    assert all(r.error is None for r in results)
    assert server.hits["rate:2:a"] == 3
    assert server.hits["flaky:b"] == 2
    assert server.hits["ok:c"] == 1


def test_retry_after_header_overrides_backoff(server):
    start = time.monotonic()
    (result,) = _backend(server, backoff_s=5.0, max_retries=2).generate([_req("rate:2:q")])
    assert result.text == "echo:q" and server.hits["rate:2:q"] == 3
    assert time.monotonic() - start < 1.5  # waited Retry-After: 0, not the 2.5-5 s backoff


def test_persistent_5xx_gives_up_after_max_retries(server):
    (result,) = _backend(server, max_retries=2).generate([_req("down")])
    assert result.error is not None and "503" in result.error
    assert result.extra["attempts"] == 3
    assert server.hits["down"] == 3


def test_too_many_429s_is_an_error_not_a_crash(server):
    (result,) = _backend(server, max_retries=1).generate([_req("rate:5:z")])
    assert result.error is not None and "429" in result.error
    assert server.hits["rate:5:z"] == 2


def test_malformed_and_incomplete_answers_are_error_results(server):
    backend = _backend(server)
    results = backend.generate([_req("malformed"), _req("ok:fine"), _req("nochoices")])
    assert "malformed JSON" in results[0].error
    assert results[1].text == "echo:fine" and results[1].error is None
    assert "choices" in results[2].error
    assert server.hits["malformed"] == 1 and server.hits["nochoices"] == 1


def test_400_is_not_retried_and_never_leaks_the_key(server):
    backend = _backend(server, max_retries=4)
    (result,) = backend.generate([_req("bad")])
    assert server.hits["bad"] == 1
    assert result.error is not None and "HTTP 400" in result.error
    assert "[redacted]" in result.error  # the server echoed the header back
    assert KEY not in result.error


def test_api_key_sent_as_bearer_and_absent_from_identity(server):
    backend = _backend(server)
    backend.generate([_req("ok:a")])
    assert server.auth == [f"Bearer {KEY}"]
    assert KEY not in json.dumps(backend.identity())
    assert KEY not in repr(backend)
    assert backend.identity() == {
        "backend": "openai-compatible",
        "model": "tiny",
        "base_url": server.base_url,
    }


def test_no_key_means_no_authorization_header(server):
    _backend(server, api_key="").generate([_req("ok:a")])
    assert server.auth == [None]


def test_the_plans_backend_takes_its_key_from_the_environment_only(server, monkeypatch, tmp_path):
    monkeypatch.setenv("SABER_API_KEY", "sk-from-env")
    build = load_build_config(
        "default", home=str(tmp_path), llm_backend="openai", llm_base_url=server.base_url,
        llm_model="tiny",
    )  # fmt: skip
    backend = make_backend(build.plan())
    (result,) = backend.generate([_req("bad")])
    assert server.auth == ["Bearer sk-from-env"]
    assert "sk-from-env" not in result.error + repr(backend) + json.dumps(backend.identity())
    assert "sk-from-env" not in json.dumps(backend_spec(backend))  # never sent to a compute node
    assert "sk-from-env" not in build.model_dump_json()  # nor part of the configuration


def test_identity_strips_credentials_from_base_url():
    backend = OpenAICompatibleBackend(
        base_url="https://user:hunter2@api.example.com:8443/v1/?api_key=abc#frag", model="m"
    )
    assert backend.identity()["base_url"] == "https://api.example.com:8443/v1"
    effort = OpenAICompatibleBackend(base_url="http://h/v1", model="m", reasoning_effort="high")
    assert effort.identity()["reasoning_effort"] == "high"


def test_concurrency_bound_respected(server):
    backend = _backend(server, max_concurrency=3)
    results = backend.generate([_req(f"slow:{i}") for i in range(12)])
    assert [r.text for r in results] == [f"echo:{i}" for i in range(12)]
    assert 2 <= server.max_in_flight <= 3


def test_timeouts_are_retried_then_reported(server):
    start = time.monotonic()
    (result,) = _backend(server, timeout_s=0.1, max_retries=1).generate([_req("hang")])
    assert result.error is not None and "connection error" in result.error
    assert server.hits["hang"] == 2
    assert time.monotonic() - start < 2


def test_connection_refused_is_an_error_result():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAICompatibleBackend(
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        api_key=KEY,
        max_retries=2,
        backoff_s=0.001,
    )
    (result,) = backend.generate([_req("ok:a")])
    assert result.error is not None and "connection error" in result.error
    assert result.extra["attempts"] == 3
    assert KEY not in result.error


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "ftp://127.0.0.1/v1"},
        {"base_url": "not a url"},
        {"max_concurrency": 0},
        {"guided_choice_format": "xml"},
        {"timeout_s": 0},
    ],
)
def test_config_errors_raise(kwargs):
    backend = OpenAICompatibleBackend(
        **({"base_url": "http://127.0.0.1:1/v1", "model": "m"} | kwargs)
    )
    with pytest.raises(ValueError):
        backend.generate([_req("ok:a")])


def test_retry_after_parsing_and_cap():
    assert retry_after_seconds("0", cap=30) == 0.0
    assert retry_after_seconds("2.5", cap=30) == 2.5
    assert retry_after_seconds("3600", cap=30) == 30
    assert retry_after_seconds("-4", cap=30) == 0.0
    assert retry_after_seconds(None, cap=30) is None
    assert retry_after_seconds("soon", cap=30) is None
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("Wed, 01 Jan 2025 12:00:10 GMT", cap=30, now=now) == 10
    assert retry_after_seconds("Wed, 01 Jan 2025 13:00:00 GMT", cap=30, now=now) == 30


def test_backoff_is_exponential_capped_and_deterministic():
    delays = [backoff_seconds(a, base=1.0, cap=8.0, key="k") for a in range(6)]
    assert delays == [backoff_seconds(a, base=1.0, cap=8.0, key="k") for a in range(6)]
    for attempt, delay in enumerate(delays):
        step = min(8.0, 2.0**attempt)
        assert step / 2 <= delay <= step
    assert max(delays) <= 8.0
    assert backoff_seconds(0, 1.0, 8.0, "k") != backoff_seconds(0, 1.0, 8.0, "other")


def test_parting_choice_logprobs_first_token():
    candidates = [(" A", -1.0), ("B\n", -2.0), ("C", -3.0), (None, -0.1)]
    assert parting_choice_logprobs([(" A", candidates)], ["A", "B"]) == {"A": -1.0, "B": -2.0}
    assert parting_choice_logprobs([("x", [("x", -0.1)])], ["A"]) == {}


def test_parting_choice_logprobs_read_where_boxed_choices_part():
    # tokens as vLLM generates \boxed{2}: "\\" "boxed" "{" "2" "}"; they part at the digit,
    # where two token ids decode to "2" (log-sum-exp) and "b" (a prefix of both) is ignored
    steps = [
        ("\\", [("\\", 0.0)]),
        ("boxed", [("boxed", -0.2), ("b", -1.9)]),
        ("{", [("{", 0.0)]),
        ("2", [("1", -1.8), ("2", -0.3), ("2", -2.0), ("x", float("-inf"))]),
        ("}", [("}", 0.0)]),
    ]
    got = parting_choice_logprobs(steps, ["\\boxed{1}", "\\boxed{2}"])
    assert got == {
        "\\boxed{1}": pytest.approx(-1.8),
        "\\boxed{2}": pytest.approx(math.log(math.exp(-0.3) + math.exp(-2.0))),
    }


def test_parse_chat_completion_edge_cases():
    request = _req("ok:a")
    null_content = {
        "id": "r",
        "choices": [{"message": {"content": None}, "finish_reason": "length"}],
    }
    result = parse_chat_completion(json.dumps(null_content).encode(), request)
    assert result.error is not None and "length" in result.error
    assert parse_chat_completion(b"\xff\xfe", request).error.startswith("malformed JSON")
    assert "choices" in parse_chat_completion(b'{"choices": []}', request).error
    sampled = {"token": "2", "logprob": -3.0, "top_logprobs": [{"token": "1", "logprob": -0.1}]}
    with_lp = {"choices": [{"message": {"content": "2"}, "logprobs": {"content": [sampled]}}]}
    judged = _req("ok:j", choices=("1", "2"), logprobs=True)
    parsed = parse_chat_completion(json.dumps(with_lp).encode(), judged)
    assert parsed.choice_logprobs == {"1": -0.1, "2": -3.0}  # the sampled token counts too
    broken = {"choices": [{"message": {"content": "2"}, "logprobs": {"content": []}}]}
    assert parse_chat_completion(json.dumps(broken).encode(), judged).choice_logprobs is None
    bare = {"choices": [{"message": {"content": "hi"}}]}
    ok = parse_chat_completion(json.dumps(bare).encode(), request)
    assert (ok.text, ok.response_id, ok.prompt_tokens, ok.error) == ("hi", "", None, None)
    assert "cached_tokens" not in ok.extra
    usage = {"prompt_tokens": 90, "prompt_tokens_details": {"cached_tokens": 64}}
    detailed = parse_chat_completion(json.dumps({**bare, "usage": usage}).encode(), request)
    assert (detailed.prompt_tokens, detailed.extra["cached_tokens"]) == (90, 64)


def test_redact_url_keeps_host_port_path():
    assert redact_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"
    assert redact_url("http://a:b@[::1]:9/v1?k=1") == "http://[::1]:9/v1"


def test_two_tokens_with_the_same_text_both_count():
    """vLLM's top_logprobs can hold two token ids that decode to "1" (as its server does for
    Gemma): both count (log-sum-exp), neither hides the other."""
    top = [{"token": "1", "logprob": -0.39}, {"token": "1", "logprob": -28.3},
           {"token": "2", "logprob": -1.2}]  # fmt: skip
    step = {"token": "1", "logprob": -0.39, "top_logprobs": top}
    body = {"choices": [{"message": {"content": "1"}, "logprobs": {"content": [step]}}]}
    judged = _req("ok:j", choices=("1", "2"), logprobs=True)
    parsed = parse_chat_completion(json.dumps(body).encode(), judged)
    assert parsed.choice_logprobs == {
        "1": pytest.approx(math.log(math.exp(-0.39) + math.exp(-28.3))),
        "2": pytest.approx(-1.2),
    }
