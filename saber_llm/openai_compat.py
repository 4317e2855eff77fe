"""OpenAI-compatible chat-completions backend: vLLM's server or any provider, over stdlib HTTP.

Every request is one ``POST {base_url}/chat/completions``; a thread pool bounds the requests in
flight to ``max_concurrency``. 429, 5xx, connection errors and timeouts are retried with capped
exponential backoff (deterministic jitter, ``Retry-After`` honoured up to the same cap); any other
4xx is final. A request that still fails, or whose answer is malformed, becomes an ``LLMResult``
with ``error`` set: ``generate`` raises only for configuration errors.

The API key comes from the ``SABER_API_KEY`` variable (never a profile setting), sent only as
``Authorization: Bearer ...``, never logged, never part of ``identity()``, and redacted from every
error text (a server that echoes the request headers cannot leak it into the results).

Choice constraints (``LLMRequest.choices``) use vLLM's structured-outputs extra body field. vLLM
≥ 0.12 documents ``{"structured_outputs": {"choice": [...]}}`` (the older top-level
``guided_choice`` field was removed in v0.12.0: docs.vllm.ai/en/latest/features/structured_outputs);
``guided_choice_format="guided_choice"`` sends the old form for older servers, and
``guided_choice=False`` sends neither (for providers that reject unknown fields).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import math
import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import Field

from saber_compute.llm.interface import LLMRequest, LLMResult, parting_choice_logprobs
from saber_llm.base import LLMBackend

if TYPE_CHECKING:
    from saber_config import BuildPlan

API_KEY_ENV = "SABER_API_KEY"
STEP_LOGGER = "dagster.builtin.saber.llm"  # the logger a Dagster step captures (get_dagster_logger)
GUIDED_CHOICE_FORMATS = ("structured_outputs", "guided_choice")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_SNIPPET_CHARS = 200


def redact_url(url: str) -> str:
    """``url`` without credentials: user info, query string and fragment dropped."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def retry_after_seconds(value: str | None, cap: float, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), capped."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), cap)


def backoff_seconds(attempt: int, base: float, cap: float, key: str) -> float:
    """Capped exponential backoff with deterministic jitter in [50%, 100%] of the step.

    The jitter comes from an RNG seeded by (key, attempt), so concurrent requests spread out but
    a rerun waits exactly as long.
    """
    step = min(cap, base * (2.0**attempt))
    rng = random.Random(zlib.crc32(f"{key}:{attempt}".encode()))
    return step * (0.5 + 0.5 * rng.random())


def parse_chat_completion(payload: bytes, request: LLMRequest) -> LLMResult:
    """An ``LLMResult`` from a chat-completions response body; problems become ``error``."""
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, ValueError):
        return LLMResult(text="", error=f"malformed JSON response ({len(payload)} bytes)")
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        return LLMResult(text="", error="response lacks choices[0].message")
    if not isinstance(message, dict):
        return LLMResult(text="", error="response choices[0].message is not an object")
    content = message.get("content")
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    if not isinstance(content, str):
        return LLMResult(text="", error=f"response has no message content (finish_reason={finish})")
    extra: dict[str, Any] = {}
    if finish is not None:
        extra["finish_reason"] = finish
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        extra["reasoning"] = reasoning
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = _int_or_none(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is not None:
        extra["cached_tokens"] = cached
    response_id = data.get("id")
    return LLMResult(
        text=content,
        response_id=response_id if isinstance(response_id, str) else "",
        choice_logprobs=_choice_logprobs(choice, request),
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
        extra=extra,
    )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _choice_logprobs(choice: dict, request: LLMRequest) -> dict[str, float] | None:
    """Per-choice log-probs at the token where the choices part, from each generated token's
    ``top_logprobs`` (``parting_choice_logprobs``), if present."""
    if not (request.choices and request.logprobs):
        return None
    try:
        walk = []
        for step in choice["logprobs"]["content"]:
            # a list, not a dict by text: two token ids may decode to the same text ("1")
            candidates = [(t["token"], float(t["logprob"])) for t in step.get("top_logprobs") or []]
            if step["token"] not in {token for token, _ in candidates}:
                candidates.append((step["token"], float(step["logprob"])))
            walk.append((step["token"], candidates))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return parting_choice_logprobs(walk, request.choices) if walk else None


class OpenAICompatibleBackend(LLMBackend):
    """Chat completions over HTTP with bounded concurrency, timeouts and retries."""

    config_name: ClassVar[str] = "openai"
    base_url: str = Field(description="API root, e.g. http://127.0.0.1:8000/v1")
    model: str = Field(description="Model name as the server knows it")
    api_key: str = Field(
        default="",
        repr=False,
        description="Bearer token; from_plan reads it from SABER_API_KEY, never a profile",
    )
    max_concurrency: int = Field(default=16, description="Requests in flight at once")
    timeout_s: float = Field(default=120.0, description="Per-attempt HTTP timeout (seconds)")
    max_retries: int = Field(default=4, description="Retries after the first attempt")
    backoff_s: float = Field(default=1.0, description="First backoff step; doubles per retry")
    max_backoff_s: float = Field(default=30.0, description="Cap on any wait (incl. Retry-After)")
    reasoning_effort: str = Field(default="", description="Sent as reasoning_effort when set")
    guided_choice: bool = Field(
        default=True, description="Constrain answers to request.choices with vLLM's extra field"
    )
    guided_choice_format: str = Field(
        default="structured_outputs",
        description='"structured_outputs" (vLLM >= 0.12) or "guided_choice" (older vLLM)',
    )
    top_logprobs: int = Field(default=5, description="top_logprobs asked for when logprobs")

    @classmethod
    def from_plan(cls, plan: BuildPlan) -> Self:
        """The server of ``plan.llm`` (the key from the ``SABER_API_KEY`` variable, when set)."""
        llm = plan.llm
        return cls(
            base_url=llm.base_url,
            model=llm.model,
            api_key=os.environ.get(API_KEY_ENV, ""),
            max_concurrency=llm.max_concurrency,
            reasoning_effort=llm.reasoning_effort,
        )

    def preflight(self) -> None:
        """The settings make requests (an http(s) URL, a model, sane limits): ``ValueError``."""
        self._check_config()

    def identity(self) -> dict[str, str]:
        """Backend, model and the credential-free base URL (+ reasoning effort when set)."""
        identity = {
            "backend": "openai-compatible",
            "model": self.model,
            "base_url": redact_url(self.base_url),
        }
        if self.reasoning_effort:
            identity["reasoning_effort"] = self.reasoning_effort
        return identity

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """Answer every request, in order; at most ``max_concurrency`` in flight."""
        self._check_config()
        if not requests:
            return []
        workers = min(self.max_concurrency, len(requests))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="saber-llm") as pool:
            return list(pool.map(self._answer, requests))

    def request_body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body for one request."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
        }
        if request.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        if self.reasoning_effort:
            body["reasoning_effort"] = self.reasoning_effort
        if request.choices and self.guided_choice:
            if self.guided_choice_format == "guided_choice":
                body["guided_choice"] = list(request.choices)
            else:
                body["structured_outputs"] = {"choice": list(request.choices)}
        return body

    # -- internals ---------------------------------------------------------------------------

    def _check_config(self) -> None:
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {redact_url(self.base_url)!r}")
        if not self.model:
            raise ValueError("model must be set")
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.backoff_s < 0:
            raise ValueError("max_retries >= 0, timeout_s > 0 and backoff_s >= 0 are required")
        if self.guided_choice_format not in GUIDED_CHOICE_FORMATS:
            raise ValueError(f"guided_choice_format must be one of {GUIDED_CHOICE_FORMATS}")

    def _redact(self, text: str) -> str:
        key = self.api_key
        return text.replace(key, "[redacted]") if key else text

    def _url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def _opener(self) -> urllib.request.OpenerDirector:
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        if host in LOOPBACK_HOSTS:  # never route a local server through an env proxy
            return urllib.request.build_opener(urllib.request.ProxyHandler({}))
        return urllib.request.build_opener()

    def _post(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self._url(), data=body, headers=headers, method="POST")
        try:
            with self._opener().open(req, timeout=self.timeout_s) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as exc:
            with exc:
                headers_out = dict(exc.headers.items()) if exc.headers else {}
                try:
                    payload = exc.read()
                except (OSError, http.client.HTTPException):
                    payload = b""
                return exc.code, headers_out, payload

    def _answer(self, request: LLMRequest) -> LLMResult:
        try:
            return self._answer_with_retries(request)
        except Exception as exc:  # a per-request failure must never sink the batch
            return self._error(f"internal error: {type(exc).__name__}: {exc}", attempts=0)

    def _answer_with_retries(self, request: LLMRequest) -> LLMResult:
        body = json.dumps(self.request_body(request)).encode()
        log = logging.getLogger(STEP_LOGGER)
        last = ""
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            wait: float | None = None
            try:
                status, headers, payload = self._post(body)
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets
                last = (
                    f"connection error: {type(exc).__name__}: {exc} — is the server at "
                    f"{self.base_url} running (SABER_LLM_BASE_URL)?"
                )
            else:
                if 200 <= status < 300:
                    result = parse_chat_completion(payload, request)
                    if result.error:
                        return self._error(result.error, attempts=attempt + 1)
                    return result
                last = f"HTTP {status}: {_snippet(payload)}"
                if status != 429 and status < 500:
                    return self._error(last, attempts=attempt + 1)
                lowered = {k.lower(): v for k, v in headers.items()}
                wait = retry_after_seconds(lowered.get("retry-after"), self.max_backoff_s)
            if attempt + 1 < attempts:
                if wait is None:
                    wait = backoff_seconds(
                        attempt, self.backoff_s, self.max_backoff_s, request.input_hash
                    )
                log.debug(f"LLM call retry {attempt + 1}/{self.max_retries} in {wait:.2f}s")
                time.sleep(wait)
        return self._error(f"{last} (gave up after {attempts} attempts)", attempts=attempts)

    def _error(self, message: str, attempts: int) -> LLMResult:
        return LLMResult(text="", error=self._redact(message), extra={"attempts": attempts})


def _snippet(payload: bytes) -> str:
    text = payload.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text[:_SNIPPET_CHARS] + ("…" if len(text) > _SNIPPET_CHARS else "")
