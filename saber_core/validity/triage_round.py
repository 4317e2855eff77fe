"""Triage of a round's pairs by pointwise grades (issue 29): the pairs the grades decide
confidently are not sent to the pairwise judge; their outcome is taken from the grades.

Every pool candidate has a pointwise grade ``g`` (Q, n). A planned pair (a, b) of query ``q`` is
decided by one of the rules of :mod:`saber_core.validity.triage`:

* ``band`` (0–2 scales such as MathPinpoint-Judge): decided iff one grade is ``≥ high`` and the
  other ``< low``; the confidently relevant candidate wins (``p_a`` = 1 or 0);
* ``calibrated``: ``p_a = σ(k · (g_a − g_b))``, the slope ``k`` fitted by maximum likelihood on
  the pairs the judge itself decided in earlier rounds (:func:`calibration_slope`); decided iff
  ``|p_a − ½| ≥ threshold``. With no judged pairs yet (round 1) ``k = 0`` and nothing is decided.

A decided pair becomes a judgments row like a judged one (:func:`decided_verdicts`), so
Bradley–Terry and the Swiss standings read both; the provenance columns say which is which
(:data:`TRIAGE_JUDGE_KIND`), and :func:`triage_budget` counts only the judged pairs as calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.special import expit

from saber_core.rating.comparisons import Comparisons
from saber_core.validity.triage import calibrate_margin, triage_by_bands, triage_by_probability

TRIAGE_JUDGE_KIND = "pointwise-triage"
TRIAGE_MODES = ("off", "band", "calibrated")


@dataclass(frozen=True)
class TriageRule:
    """``mode`` (:data:`TRIAGE_MODES`), the band cuts ``low``/``high`` and the calibrated
    rule's ``threshold`` on ``|p − ½|``."""

    mode: str = "off"
    low: float = 0.5
    high: float = 1.5
    threshold: float = 0.4

    def __post_init__(self) -> None:
        if self.mode not in TRIAGE_MODES:
            raise ValueError(f"triage mode must be one of {TRIAGE_MODES}, got {self.mode!r}")


@dataclass(frozen=True)
class RoundSplit:
    """One round's pairs split: ``judged`` and ``decided`` (Q, m, 2) are the planned pairs with
    the other part's slots emptied (``-1``); ``p_decided`` (Q, m) is P(a wins) of each decided
    slot (NaN elsewhere)."""

    judged: np.ndarray
    decided: np.ndarray
    p_decided: np.ndarray

    @property
    def n_decided(self) -> int:
        """Pairs the grades decided."""
        return int((self.decided[..., 0] >= 0).sum())

    @property
    def n_judged(self) -> int:
        """Pairs left to the judge."""
        return int((self.judged[..., 0] >= 0).sum())


def calibration_slope(judged: Comparisons, grades: np.ndarray) -> float:
    """``k`` of ``P(a wins) = σ(k · (g_a − g_b))`` by maximum likelihood on the judge's own
    decided rows (:func:`saber_core.validity.triage.calibrate_margin`); 0 without any."""
    margin = grades[judged.q, judged.a] - grades[judged.q, judged.b]
    return calibrate_margin(margin, judged.y)


def split_round(pairs: np.ndarray, grades: np.ndarray, rule: TriageRule, k: float) -> RoundSplit:
    """Split the filled slots of ``pairs`` (Q, m, 2) by ``rule`` on ``grades`` (Q, n); ``k`` is
    the calibrated rule's slope (:func:`calibration_slope`; unused by the band rule)."""
    pairs = np.asarray(pairs)
    q_idx, slot = np.nonzero(pairs[..., 0] >= 0)
    ga = grades[q_idx, pairs[q_idx, slot, 0]]
    gb = grades[q_idx, pairs[q_idx, slot, 1]]
    if rule.mode == "band":
        split = triage_by_bands(ga, gb, low=rule.low, high=rule.high)
    elif rule.mode == "calibrated" and k > 0:
        split = triage_by_probability(expit(k * (ga - gb)), rule.threshold, soft=True)
    else:
        split = triage_by_probability(np.full(len(q_idx), np.nan), 0.5)
    judged, decided = pairs.copy(), np.full_like(pairs, -1)
    p = np.full(pairs.shape[:2], np.nan)
    rows, slots = q_idx[split.cheap], slot[split.cheap]
    decided[rows, slots] = pairs[rows, slots]
    judged[rows, slots] = -1
    p[rows, slots] = split.cheap_outcome
    return RoundSplit(judged=judged, decided=decided, p_decided=p)


@dataclass(frozen=True)
class GradeVerdicts:
    """The grades' verdicts on decided pairs, in the shape of a judge's answer."""

    p_first: np.ndarray
    raw: list[str]
    drop_reason: list[str | None]
    call_keys: list[str]


def decided_verdicts(
    split: RoundSplit, grades: np.ndarray
) -> Callable[[list[str], list[str], list[str]], GradeVerdicts]:
    """A judge callable for :func:`saber_core.tournament.judgment_table.judge_pairs` on
    ``split.decided``: it answers from the grades (no call), in the slot order ``judge_pairs``
    asks (``np.nonzero``), raw = ``"grades g_a vs g_b"``."""
    q_idx, slot = np.nonzero(split.decided[..., 0] >= 0)
    ga = grades[q_idx, split.decided[q_idx, slot, 0]]
    gb = grades[q_idx, split.decided[q_idx, slot, 1]]
    verdicts = GradeVerdicts(
        p_first=split.p_decided[q_idx, slot],
        raw=[f"grades {a:.6g} vs {b:.6g}" for a, b in zip(ga, gb, strict=True)],
        drop_reason=[None] * len(q_idx),
        call_keys=[""] * len(q_idx),
    )

    def judge(queries: list[str], first: list[str], second: list[str]) -> GradeVerdicts:
        if len(queries) != len(verdicts.raw):
            raise ValueError(f"{len(queries)} pairs asked, {len(verdicts.raw)} decided")
        return verdicts

    return judge


def triage_counts(judgments: pl.DataFrame, calls_per_pair: int) -> dict[str, int]:
    """Pairs decided by triage (rows whose ``judge_kind`` is :data:`TRIAGE_JUDGE_KIND`), pairs
    judged (the other rows) and judge calls saved = decided · ``calls_per_pair``."""
    n_decided = judgments.filter(pl.col("judge_kind") == TRIAGE_JUDGE_KIND).height
    return {
        "n_decided_by_triage": n_decided,
        "n_judged": judgments.height - n_decided,
        "judge_calls_saved_by_triage": n_decided * calls_per_pair,
    }


def triage_budget(
    per_query: pl.DataFrame, judgments: pl.DataFrame, calls_per_pair: int
) -> tuple[pl.DataFrame, dict[str, int]]:
    """The per-query budget (:func:`saber_core.tournament.judgment_table.query_budget`) with
    ``judge_calls = (pairs − decided) · calls_per_pair`` (``decided``: the query's triage rows),
    and the build's :func:`triage_counts`."""
    triaged = pl.col("judge_kind") == TRIAGE_JUDGE_KIND
    decided = judgments.group_by("query_id").agg(triaged.sum().cast(pl.Int64).alias("_decided"))
    calls = (pl.col("pairs") - pl.col("_decided").fill_null(0)) * calls_per_pair
    out = (
        per_query.join(decided, on="query_id", how="left", maintain_order="left")
        .with_columns(calls.alias("judge_calls"))
        .drop("_decided")
    )
    return out, triage_counts(judgments, calls_per_pair)
