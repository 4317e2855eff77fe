"""The study's judge from a judge probe (``saber study budget --judge-fit judge-probe.json``).

``saber judge probe`` fits the study's judge formula (:mod:`saber_study.label_budget.world`) to a
real judge's answers (:mod:`saber_core.validity.judge_fit`) and writes, per condition
(``configured``: the judge as the build runs it; ``sampled``: a greedy judge asked again at a
sampling temperature), the fitted :class:`JudgeModel` fields: ``judge_model`` at the estimated
signal (None when the signal's 95% interval reaches 0), ``judge_model_upper_signal`` refitted
with the signal held at the upper end of that interval (the most signal the probe allows; the
only choice for a judge whose signal interval reaches 0). Fields the probe does not measure
(the pointwise grader, the judge-like retriever, the anchored scale's reference) keep the
study's defaults.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from saber_study.label_budget.world import JudgeModel

SIGNALS = {"estimate": "judge_model", "upper": "judge_model_upper_signal"}


class JudgeFitError(ValueError):
    """A probe file that gives no usable judge (missing condition, no fit, no signal)."""


def judge_from_probe(
    path: Path,
    condition: str = "configured",
    signal: str = "estimate",
    base: JudgeModel | None = None,
) -> tuple[JudgeModel, str]:
    """The fitted judge of ``condition`` at ``signal`` (``estimate`` / ``upper``) over ``base``
    (default :class:`JudgeModel`), and a one-line description of where it came from."""
    probe = json.loads(Path(path).read_text())
    conditions = probe.get("conditions", {})
    if condition not in conditions:
        raise JudgeFitError(
            f"{path}: no condition {condition!r} (it has {', '.join(conditions) or 'none'})"
        )
    fit = conditions[condition].get("fit")
    if fit is None:
        raise JudgeFitError(f"{path}: condition {condition!r} has no fit (probe run --no-fit?)")
    fields = fit.get(SIGNALS[signal])
    if fields is None:
        why = fit.get("not_identified", {}).get("signal", "no finite fit")
        hint = "; try --judge-fit-signal upper" if signal == "estimate" else ""
        raise JudgeFitError(f"{path}: {condition} judge not representable: {why}{hint}")
    model = replace(base or JudgeModel(), **{k: float(v) for k, v in fields.items()})
    judge = probe.get("judge", {})
    source = (
        f"fitted to judge probe {probe.get('run_id', '?')} ({judge.get('judge_kind')} "
        f"{judge.get('judge_model') or ''}, {condition}, temperature "
        f"{conditions[condition].get('temperature')}, {signal} signal, gap "
        f"{probe.get('gap', {}).get('kind')})"
    )
    return model, source
