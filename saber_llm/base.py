"""The LLM backend: one interface over every engine, plain data without Dagster (the assets
receive the build's backend as a resource, ``dg.ResourceParam[LLMBackend]``; ``saber eval``
uses the same classes without Dagster).

The request and result types and the engines themselves live on the compute floor
(:mod:`saber_compute.llm.interface`): a backend holds an engine's settings and names it
by :meth:`LLMBackend.engine_spec`, so the SLURM payload and the LLM server build the very same
engine on a compute node. :class:`EngineBackend` delegates to the engine it names (built once per
process and configuration); a backend answering in the Dagster process itself (the
OpenAI-compatible HTTP client, test fakes) implements ``generate`` directly. A backend the
configuration can name (``llm.backend``) sets :attr:`LLMBackend.config_name` and builds itself
from the plan (:meth:`LLMBackend.from_plan`): ``saber_llm.factory.BACKENDS`` is the table.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Self

import pydantic

from saber_compute.llm.interface import LLMRequest, LLMResult, build_engine

if TYPE_CHECKING:
    from saber_config import BuildPlan

SECRET_HINTS = ("key", "secret", "token", "password")
_ENGINES: dict[tuple[str, str], Any] = {}
_ENGINES_LOCK = threading.Lock()


class Component(pydantic.BaseModel):
    """A configured part of a build that the assets receive as a resource (an LLM backend, a
    judge): frozen, validated fields; no Dagster type."""

    model_config = pydantic.ConfigDict(
        frozen=True, arbitrary_types_allowed=True, ignored_types=(cached_property,)
    )


class LLMBackend(Component, ABC):
    """A batch LLM backend. Implementations: vLLM offline, OpenAI-compatible HTTP, embedded."""

    config_name: ClassVar[str] = ""  # the ``llm.backend`` value naming it (its key in BACKENDS)

    @classmethod
    def from_plan(cls, plan: BuildPlan) -> Self:
        """The backend of ``plan.llm`` (default: one without settings)."""
        return cls()

    def preflight(self) -> None:
        """Before any stage, check what can be checked without loading a model (environment,
        model folder, settings); raise with the fix. Default: nothing to check."""

    @abstractmethod
    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """Answer every request (same order); failures are results with ``error`` set."""

    @abstractmethod
    def identity(self) -> dict[str, str]:
        """``backend`` and ``model`` (and anything else that changes answers)."""

    def load(self) -> None:
        """Load the model now (an LLM server times its one load); default: nothing to load."""

    def engine_spec(self) -> tuple[str, dict[str, Any]]:
        """``(module:Class, config)`` a compute node builds this backend's engine from
        (:func:`saber_compute.llm.interface.build_engine`); default: the resource itself."""
        cls = type(self)
        return f"{cls.__module__}:{cls.__name__}", self.model_dump()


class EngineBackend(LLMBackend):
    """A backend whose answers come from a Dagster-free engine (``ENGINE``: ``module:Class``),
    configured by the resource's fields and built once per process and configuration."""

    ENGINE: ClassVar[str]

    def engine_spec(self) -> tuple[str, dict[str, Any]]:
        """The engine class and the resource's fields as its config."""
        return self.ENGINE, self.model_dump()

    def engine(self) -> Any:
        """The process-wide engine for this configuration."""
        spec, config = self.engine_spec()
        key = (spec, repr(sorted(config.items())))
        with _ENGINES_LOCK:
            if key not in _ENGINES:
                _ENGINES[key] = build_engine(spec, config)
            return _ENGINES[key]

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """The engine's answers."""
        return self.engine().generate(requests)

    def identity(self) -> dict[str, str]:
        """The engine's identity."""
        return self.engine().identity()

    def load(self) -> None:
        """Load the engine's model now."""
        self.engine().load()


def forget_engines() -> None:
    """Drop the process's engines (tests)."""
    with _ENGINES_LOCK:
        _ENGINES.clear()


def backend_spec(backend: LLMBackend) -> tuple[str, dict[str, Any]]:
    """``module:Class`` and the JSON-able config a compute node builds the backend's engine
    from (secret-looking fields dropped: a key never leaves this process)."""
    spec, config = backend.engine_spec()
    kept = {k: v for k, v in config.items() if not any(h in k.lower() for h in SECRET_HINTS)}
    return spec, json.loads(json.dumps(kept, default=str))
