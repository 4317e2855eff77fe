"""Presentation order of a judged pair, and the position bias it lets through.

Orders (``tournament.presentation``):

* ``pool_order`` — one call per pair, the smaller pool position (the published rule: the
  smaller id) shown first. A judge that prefers the first answer by ``b`` (on its logit scale)
  then systematically favours the candidates with small positions (a group bias).
* ``both_orders`` — two calls per pair, ``(a, b)`` and ``(b, a)``, and the two probabilities
  averaged: ``p = ½ (p_ab + 1 − p_ba)``; the bias cancels to first order at twice the cost.
* ``seeded_random`` — one call per pair, shown in a seeded random order: pair ``(a, b)`` of
  round ``r`` is shown swapped iff ``u < ½`` with ``u`` drawn from
  ``default_rng([seed, 12, r]).random((Q, m))`` at its (query, slot); the bias becomes noise
  with mean zero for every candidate.

Measures: the share of decided verdicts that pick the candidate shown first (½ without position
bias), and the group bias: per query, the mean rating error of the first half of the pool
positions minus that of the second half (error = rating − reference rating), averaged over
queries (0 when the order does not favour small positions).
"""

from __future__ import annotations

import numpy as np

from saber_core.tournament.rows import Rows

PRESENTATIONS = ("pool_order", "both_orders", "seeded_random")
PRESENTATION_STREAM = 12


def calls_per_pair(presentation: str) -> int:
    """Judge calls one pair costs under ``presentation`` (2 for ``both_orders``, else 1)."""
    if presentation not in PRESENTATIONS:
        raise ValueError(f"presentation must be one of {PRESENTATIONS}, got {presentation!r}")
    return 2 if presentation == "both_orders" else 1


def presentation_flips(
    seed: int, round_no: int, pairs: np.ndarray, rows: Rows | None = None
) -> np.ndarray:
    """(Q, m) bool: which pairs of round ``round_no`` are shown swapped under ``seeded_random``
    (module docstring); empty slots (``-1``) are never swapped. ``rows``: these queries are rows
    of a whole tournament (a replay, :class:`~saber_core.tournament.rows.Rows`)."""
    rng = np.random.default_rng([seed, PRESENTATION_STREAM, round_no])
    q, m = pairs.shape[:2]
    u = rows.pick(rng.random((rows.total, m))) if rows is not None else rng.random((q, m))
    return (u < 0.5) & (pairs[..., 0] >= 0)


def present(pairs: np.ndarray, flips: np.ndarray) -> np.ndarray:
    """``pairs`` (Q, m, 2) with the two candidates swapped where ``flips``: first = shown first."""
    return np.where(flips[..., None], pairs[..., ::-1], pairs)


def first_answer_share(outcome_shown_first: np.ndarray) -> float:
    """Share of decided verdicts (1 = the candidate shown first won, 0 = the second; NaN =
    dropped) that picked the candidate shown first; NaN when none is decided."""
    y = np.asarray(outcome_shown_first, dtype=float)
    y = y[np.isfinite(y)]
    return float(y.mean()) if y.size else float("nan")


def group_bias(ratings: np.ndarray, reference: np.ndarray) -> float:
    """Mean over queries of ``mean(e[:h]) − mean(e[h:])``, ``e = ratings − reference`` (Q, n)
    and ``h = n // 2``: how much the first half of the pool positions is over-rated."""
    e = np.asarray(ratings, dtype=float) - np.asarray(reference, dtype=float)
    h = e.shape[1] // 2
    return float((e[:, :h].mean(axis=1) - e[:, h:].mean(axis=1)).mean())
