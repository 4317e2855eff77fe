"""Failing an LLM stage so that Dagster retries it (transient backend errors only)."""

from __future__ import annotations

import dagster as dg


class BackendUnavailableError(RuntimeError):
    """LLM calls failed after the backend's own retries (server down, timeouts, 5xx)."""


def fail_on_backend_errors(stage: str, errors: int, calls: int, cached: int) -> None:
    """Stop a stage whose LLM calls failed, asking Dagster to retry it (2 retries, 10 s apart).

    Answers received so far are already in the call cache, so the retry pays only for the rest.
    """
    if errors == 0:
        return
    cause = BackendUnavailableError(
        f"{stage}: {errors} of {calls} LLM calls failed after the backend's retries "
        f"({cached} answers are cached; a retry pays only for the rest)"
    )
    raise dg.RetryRequested(max_retries=2, seconds_to_wait=10) from cause
