"""A stage's view of the build plan that records every setting the stage reads.

``reads = PlanReads(plan)``: ``reads.tournament.rounds`` returns the value and records
``tournament.rounds``; sections (the plan, its dataclasses, the config sections, the resolved
construction) are walked field by field, so a property or method of a section records the fields
it reads; any other value (a core rule object such as ``RoundRules`` or ``PoolConfig``, paths,
tuples) is recorded whole. :func:`unwrap` hands a section to code that needs the real object and
records it whole.

The recorded reads are the stage's settings fingerprint: a stage whose recorded settings still
have the same values (:func:`values_at`) in a later plan, with the same code and inputs, would
compute the same tables. No stage keeps a list of the keys it depends on.
"""

from __future__ import annotations

import ast
import dataclasses
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic

from saber_config.plan import (
    AuditPlan,
    BuildPlan,
    PoolsPlan,
    RatingPlan,
    ThresholdsPlan,
    TournamentPlan,
)
from saber_core.construction import Construction

MISSING = "<missing>"
# Where a build keeps its files: read freely, never recorded — the files' contents are what a
# stage depends on (its upstream data versions), and a stage whose stored files are gone
# recomputes anyway; a SABER home moved or copied elsewhere is still the same build.
UNRECORDED = ("paths",)
_SECTIONS = (BuildPlan, ThresholdsPlan, PoolsPlan, TournamentPlan, RatingPlan, AuditPlan)


def _is_section(value: Any) -> bool:
    """Walked field by field: the plan's own dataclasses, the config sections, the
    construction."""
    if isinstance(value, (*_SECTIONS, Construction)):
        return True
    return isinstance(value, pydantic.BaseModel) and type(value).__module__.startswith(
        "saber_config"
    )


def _fields(value: Any) -> set[str]:
    if dataclasses.is_dataclass(value):
        return {f.name for f in dataclasses.fields(value)}
    return set(type(value).model_fields)


def canonical(value: Any) -> Any:
    """A JSON-ready form of a setting (dataclasses and config sections as mappings; a resolved
    section as its written settings overlaid with the resolved ones)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
        written = out.pop("written", None)
        return {**written, **out} if isinstance(written, dict) else out
    if isinstance(value, pydantic.BaseModel):
        return {k: canonical(getattr(value, k)) for k in type(value).model_fields}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


class _Tracked:
    """A section of the plan seen through a recording view."""

    __slots__ = ("_log", "_obj", "_path")

    def __init__(self, obj: Any, path: str, log: dict[str, Any]) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name: str) -> Any:
        obj, path = self._obj, f"{self._path}.{name}" if self._path else name
        fields = _fields(obj)
        if not self._path and name in UNRECORDED:
            return getattr(obj, name)
        if name in fields or ("written" in fields and name in _fields(obj.written)):
            value = getattr(obj, name)
            if _is_section(value):
                return _Tracked(value, path, self._log)
            self._log[path] = canonical(value)
            return value
        attribute = getattr(type(obj), name, None)
        if isinstance(attribute, property):
            value = attribute.fget(self)  # what it reads is recorded, and so is its result
            self._log[path] = canonical(value)
            return value
        if isinstance(attribute, types.FunctionType):
            return _RecordedCall(attribute, self, path)
        raise AttributeError(f"plan {self._path or 'plan'}: no setting {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("the build plan is read-only")

    def __repr__(self) -> str:
        return f"<plan reads {self._path or 'plan'}>"


class _RecordedCall:
    """A method of a section called through the view: what it reads and its result (under
    ``path(args)``) are recorded, so a change of the method's code is seen too."""

    def __init__(self, function: types.FunctionType, owner: _Tracked, path: str) -> None:
        self.function, self.owner, self.path = function, owner, path

    def __call__(self, *args: Any) -> Any:
        value = self.function(self.owner, *args)
        log = object.__getattribute__(self.owner, "_log")
        log[f"{self.path}{args!r}"] = canonical(value)
        return value


class PlanReads(_Tracked):
    """The recording view of a whole plan; :attr:`reads` holds what was read so far."""

    def __init__(self, plan: BuildPlan) -> None:
        super().__init__(plan, "", {})

    @property
    def reads(self) -> dict[str, Any]:
        """Every setting read so far: dotted name → its JSON-ready value, sorted by name."""
        return dict(sorted(object.__getattribute__(self, "_log").items()))

    @property
    def plan(self) -> BuildPlan:
        """The plan behind the view: reading through it records nothing, for settings that
        change how a stage runs, never what it computes (``execution``, ``slurm``,
        ``allpairs`` workers and shards, paths of caches)."""
        return object.__getattribute__(self, "_obj")


def unwrap(section: Any) -> Any:
    """The real object behind a recorded section, recorded whole (for code that needs it)."""
    if isinstance(section, _Tracked):
        obj = object.__getattribute__(section, "_obj")
        log = object.__getattribute__(section, "_log")
        log[object.__getattribute__(section, "_path")] = canonical(obj)
        return obj
    return section


def values_at(plan: BuildPlan, paths: list[str] | Mapping[str, Any]) -> dict[str, Any]:
    """The current JSON-ready values of recorded settings in ``plan`` (:data:`MISSING` for a
    name the plan no longer has), sorted by name."""
    out: dict[str, Any] = {}
    for path in sorted(paths):
        try:
            out[path] = canonical(_value_at(plan, path))
        except (AttributeError, TypeError, ValueError, SyntaxError):
            out[path] = MISSING
    return out


def _value_at(plan: BuildPlan, path: str) -> Any:
    """The value of a recorded name: ``a.b.c``, or a method call ``a.b.m('x',)``."""
    head, call, args = path.partition("(")
    value: Any = plan
    for part in head.split("."):
        value = getattr(value, part)
    if call:
        value = value(*ast.literal_eval(f"({args}"))
    return value
