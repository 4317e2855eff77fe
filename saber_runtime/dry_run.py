"""What a build would do, decided without doing it (``saber plan``).

Inside :func:`dry_run`, :func:`saber_runtime.stage.materialize_stage` computes each asset's
fingerprint as a real build would — the settings it read last time looked up in today's plan,
its extra inputs, its code, its upstream versions — and records a :class:`Decision` instead of
computing: ``reuse``, ``recompute`` or ``new``, with every reason (a changed setting with its
old and new value, a changed input or prompt, changed code files, an upstream asset that
recomputes), and for LLM stages the calls that would miss the cache with a time estimate at the
rate the stage measured last time. An asset that recomputes passes a predicted data version
downstream, so its dependants recompute too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from saber_config.reads import PlanReads, values_at
from saber_lineage.code_version import PROJECT_ROOT, module_closure

LLM_INPUTS = ("identity", "prompt_hash", "judge")  # extra inputs whose change re-asks the LLM
NEVER = "never materialized in this SABER home"
PLANNED = "planned:"  # the data version a dry run predicts for an asset that recomputes


@dataclass
class Decision:
    """One asset's decision and why (module docstring)."""

    asset: str
    action: str
    reasons: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)  # settings, inputs, code, upstream
    llm_calls: int = 0
    llm_calls_certain: bool = False
    llm_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


@dataclass
class DryRun:
    """The decisions so far and the data versions they predict."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    predicted: dict[str, str] = field(default_factory=dict)


_ACTIVE: list[DryRun] = []


@contextmanager
def dry_run() -> Iterator[DryRun]:
    """Within this block, stages decide and record instead of computing (module docstring)."""
    state = DryRun()
    _ACTIVE.append(state)
    try:
        yield state
    finally:
        _ACTIVE.remove(state)


def active() -> DryRun | None:
    """The dry run in progress, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def code_files(module: str) -> dict[str, str]:
    """The files a module's code version covers, each with a short content hash."""
    return {
        path.relative_to(PROJECT_ROOT).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()[
            :12
        ]
        for path in module_closure(module)
    }


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def reasons(
    previous: Mapping[str, Any], plan: PlanReads, extra: Mapping[str, Any], module: str,
    upstream: Mapping[str, str],
) -> list[str]:  # fmt: skip
    """Why a recorded entry no longer holds (empty: it holds)."""
    meta = previous["metadata"]
    if "reads" not in meta:
        return ["recorded by an earlier version of the platform"]
    out = []
    now_reads = values_at(plan.plan, meta["reads"])
    for key in _changed(meta["reads"], now_reads):
        out.append(f"setting {key}: {_short(meta['reads'][key])} → {_short(now_reads[key])}")
    for key in _changed(meta.get("extra", {}), extra):
        out.append(f"input {key} changed")
    files = code_files(module)
    for path in _changed(meta.get("code_files", {}), files):
        out.append(f"code {path} changed")
    if not out and meta.get("code") and not meta.get("code_files"):
        out.append("code changed")
    for name in _changed(meta.get("upstream", {}), upstream):
        moving = str(upstream.get(name, "")).startswith(PLANNED)
        out.append(f"upstream {name} {'recomputes' if moving else 'changed'}")
    return out


def llm_estimate(
    previous: Mapping[str, Any] | None, why: list[str]
) -> tuple[int, bool, float | None]:
    """(calls that may miss the cache, whether they surely do, seconds at the measured rate):
    from the calls the stage made last time; certain when the backend, the prompt or the judge
    changed."""
    if previous is None:
        return 0, False, None
    figures, meta = previous["metadata"]["figures"], previous["metadata"]
    calls = sum(v for k, v in figures.items() if k.endswith(("backend_calls", "cache_hits"))
                and isinstance(v, int | float))  # fmt: skip
    paid = sum(v for k, v in figures.items() if k.endswith("backend_calls")
               and isinstance(v, int | float))  # fmt: skip
    certain = any(r.startswith(tuple(f"input {k} " for k in LLM_INPUTS)) for r in why)
    seconds = meta.get("compute_s")
    rate = paid / seconds if seconds and paid else None
    return int(calls), certain, (round(calls / rate, 1) if rate else None)


def causes_of(why: list[str]) -> list[str]:
    """The kinds of reasons: ``settings``, ``inputs``, ``code``, ``upstream``, ``tables``."""
    kinds = {"setting": "settings", "input": "inputs", "code": "code", "upstream": "upstream"}
    return sorted({kinds.get(reason.split(" ", 1)[0], "tables") for reason in why})


def decide(
    state: DryRun, asset: str, previous: Mapping[str, Any] | None, plan: PlanReads,
    extra: Mapping[str, Any], module: str, upstream: Mapping[str, str], tables_there: bool,
) -> Decision:  # fmt: skip
    """Record and return the decision for ``asset`` (module docstring)."""
    if previous is None:
        decision = Decision(asset, "new", [NEVER], ["new"])
    else:
        why = reasons(previous, plan, extra, module, upstream)
        if not why and not tables_there:
            why = ["stored tables or files are missing"]
        decision = Decision(asset, "recompute" if why else "reuse", why, causes_of(why))
    if decision.action != "reuse":
        calls, certain, seconds = llm_estimate(previous, decision.reasons)
        decision.llm_calls, decision.llm_calls_certain, decision.llm_seconds = (
            calls,
            certain,
            seconds,
        )
        state.predicted[asset] = f"{PLANNED}{asset}"
    elif previous is not None:
        state.predicted[asset] = previous["data_version"]
    state.decisions[asset] = decision
    return decision
