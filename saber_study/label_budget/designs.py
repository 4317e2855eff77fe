"""The judging designs of the label-budget study, played on a chunk of simulated queries.

Every design is played call by call up to the largest budget; the labels at budget ``B`` come
from the first ``B`` calls of each query (a prefix: planning only looks back), fitted with the
platform's Bradley–Terry objective (L2, ``C``, hard outcomes; :mod:`.bt`). Presentation
(``pool_order``: the smaller candidate id shown first, the published rule; ``seeded_random``:
the k-th call of a pair shown swapped where a seeded hash says so) applies to every pairwise
call. Designs:

* ``swiss``: the build's Swiss rounds (:func:`saber_core.tournament.swiss.swiss_round`, ``n / 2``
  calls per round, pairs never repeat).
* ``adaptive`` (top-focused): ``warmup`` Swiss rounds, then rounds of ``n`` games (``n / 2``
  calls) shared out by :func:`.pairing.demands` with priority ``π_i = 2^{ŷ_i} sd_i`` — the
  delta-method spread of candidate i's gain ``2^{y} − 1`` under the published min–max labels
  ``ŷ`` of the current fit, ``sd_i = (1 + I_i)^{-1/2}`` (``I_i`` its Fisher information) —
  paired by :func:`.pairing.pair_by_demand`; replanned (refit) every ``replan_every`` rounds.
* ``metric_aware`` (calls where the retrievers' top-10s differ): as ``adaptive`` with
  ``π_i = (std_r w_ri + mean_r w_ri) 2^{ŷ_i} sd_i``, ``w_ri = 1 / log2(1 + rank)`` when i is in
  the top 10 of ``r`` (else 0), over the ``known_retrievers`` (those a build runs; the other
  retrievers are unseen by the design) and the current ideal ranking by the fit.
* ``pointwise_top``: one pointwise grade call per candidate (grades 0–4), then pairwise rounds
  only among the ``top_k`` best-graded candidates (ties in random order), all their games by
  demand pairing on the current fit. Grades enter the fit as an ordinal model on the same logit
  scale: four threshold players ``t_0 < … < t_3`` join the query, and a candidate of grade g
  "beats" ``t_{g−1}`` and "loses to" ``t_g`` (one row each, where they exist).

The ``background`` share of the focused designs' games goes to every candidate equally, so the
bottom of the pool keeps being compared. Every focused design also caps a candidate's games per
round at ``cap``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from saber_core.tournament.swiss import swiss_round
from saber_study.label_budget import bt
from saber_study.label_budget.pairing import demands, pair_by_demand
from saber_study.label_budget.world import GRADE_THRESHOLDS, Queries, hashed_uniform

DESIGNS = ("swiss", "adaptive", "metric_aware", "pointwise_top")
PRESENTATIONS = ("pool_order", "seeded_random")
N_THRESHOLDS = len(GRADE_THRESHOLDS)
ROUND_STREAM, TOPK_STREAM, ROUNDING_STREAM = 8, 9, 10


@dataclass(frozen=True)
class DesignConfig:
    """Budgets and the designs' settings (module docstring)."""

    budgets: tuple[int, ...] = (300, 450, 600, 750, 1050, 1500)
    warmup: int = 4
    replan_every: int = 2
    background: float = 0.25
    cap: int = 4
    window: int = 8
    top_k: int = 40
    known_retrievers: tuple[int, ...] = (0, 3, 6, 9, 13, 17)
    C: float = 1.0
    designs: tuple[str, ...] = DESIGNS
    presentations: tuple[str, ...] = PRESENTATIONS


@dataclass
class Played:
    """The calls of one design on a chunk: rows ``(a, b, y)`` per query in call order (plus the
    pointwise threshold rows first), ``calls`` the judge calls each row prefix used."""

    a: np.ndarray
    b: np.ndarray
    y: np.ndarray
    rows: np.ndarray  # (Qc,) rows filled
    calls: np.ndarray  # (Qc,) judge calls so far
    first_wins: list = field(default_factory=list)  # per call: did the shown-first one win
    rows_at_calls: dict = field(default_factory=dict)  # budget -> (Qc,) row prefix length


def _minmax(beta: np.ndarray) -> np.ndarray:
    lo, hi = beta.min(axis=1, keepdims=True), beta.max(axis=1, keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    return 5.0 * (beta - lo) / span


def _top10_weights(scores: np.ndarray) -> np.ndarray:
    """``1 / log2(1 + rank)`` for the top 10 of each row of ``scores`` (…, n), else 0."""
    order = np.argsort(-scores, axis=-1, kind="stable")[..., :10]
    w = np.zeros(scores.shape)
    np.put_along_axis(w, order, 1.0 / np.log2(np.arange(2, 12)), axis=-1)
    return w


class Runner:
    """Plays one design × presentation on a chunk and fits BT at every budget."""

    def __init__(self, world: Queries, design: str, presentation: str, cfg: DesignConfig):
        if design not in DESIGNS or presentation not in PRESENTATIONS:
            raise ValueError(f"unknown design/presentation {design!r}/{presentation!r}")
        self.w, self.design, self.presentation, self.cfg = world, design, presentation, cfg
        qc, n = world.strengths.shape
        self.qc, self.n = qc, n
        self.players = n + (N_THRESHOLDS if design == "pointwise_top" else 0)
        width = max(cfg.budgets) + 2 * n + n  # one spare round of slack
        self.p = Played(
            a=np.zeros((qc, width), dtype=np.int64),
            b=np.zeros((qc, width), dtype=np.int64),
            y=np.zeros((qc, width)),
            rows=np.zeros(qc, dtype=np.int64),
            calls=np.zeros(qc, dtype=np.int64),
        )
        self.met = np.zeros((qc, n, n), dtype=np.int16)
        self.wins = np.zeros((qc, n))
        self.beta = np.zeros((qc, self.players))
        self.round = 0
        self.seed_key = world.seed * 1_000_003 + int(world.ids[0])
        if design == "metric_aware":
            known = world.scores[list(cfg.known_retrievers)]
            self.known_w = _top10_weights(known)  # (K, Qc, n)

    # ------------------------------------------------------------------ judging
    def _append(self, a: np.ndarray, b: np.ndarray, y: np.ndarray, valid: np.ndarray) -> None:
        qi, slot = np.nonzero(valid)
        at = self.p.rows[qi] + (np.cumsum(valid, axis=1) - 1)[qi, slot]
        self.p.a[qi, at], self.p.b[qi, at], self.p.y[qi, at] = a[valid], b[valid], y[valid]
        self.p.rows += valid.sum(axis=1)

    def play(self, pairs: np.ndarray) -> None:
        """Judge a round of pairs (Qc, m, 2), smaller id first, -1 = empty."""
        valid = pairs[..., 0] >= 0
        q = np.broadcast_to(np.arange(self.qc)[:, None], valid.shape)[valid]
        a, b = pairs[..., 0][valid], pairs[..., 1][valid]
        k = self.met[q, a, b].astype(np.int64)
        if self.presentation == "pool_order":
            a_first = np.ones(len(a), dtype=bool)
        else:
            a_first = ~self.w.flips(q, a, b, k)
        y = self.w.call(q, a, b, k, a_first)
        self.p.first_wins.append(np.where(a_first, y, 1.0 - y))
        self.met[q, a, b] += 1
        self.met[q, b, a] += 1
        np.add.at(self.wins, (q, np.where(y == 1.0, a, b)), 1.0)
        full_a = np.full(valid.shape, -1, dtype=np.int64)
        full_b, full_y = full_a.copy(), np.zeros(valid.shape)
        full_a[valid], full_b[valid], full_y[valid] = a, b, y
        self._append(full_a, full_b, full_y, valid)
        self.p.calls += valid.sum(axis=1)

    def grade(self) -> None:
        """The pointwise stage: one call per candidate; threshold rows (module docstring)."""
        n, g = self.n, self.w.grades
        ids = np.broadcast_to(np.arange(n), g.shape)
        above = g >= 1  # candidate beats t_{g-1}
        below = g <= N_THRESHOLDS - 1  # candidate loses to t_g
        self._append(ids, n + np.maximum(g - 1, 0), np.ones(g.shape), above)
        self._append(ids, n + np.minimum(g, N_THRESHOLDS - 1), np.zeros(g.shape), below)
        self.p.calls += n

    # ------------------------------------------------------------------ planning
    def refit(self, tol: float = 1e-4) -> None:
        self.beta = bt.fit(
            self.p.a, self.p.b, self.p.y, self.p.rows, self.players, self.cfg.C, self.beta, tol
        )

    def _order(self, beta: np.ndarray) -> np.ndarray:
        key = hashed_uniform(
            self.w.seed, ROUND_STREAM, self.w.ids[:, None], self.round, np.arange(self.n)[None, :]
        )
        return np.lexsort((key, -beta), axis=1)

    def priority(self) -> np.ndarray:
        beta = self.beta[:, : self.n]
        if self.design == "pointwise_top":
            key = hashed_uniform(
                self.w.seed, TOPK_STREAM, self.w.ids[:, None], np.arange(self.n)[None, :]
            )
            rank = np.argsort(np.lexsort((key, -self.w.grades), axis=1), axis=1)
            return (rank < self.cfg.top_k).astype(float)
        info = bt.information(beta, self.p.a, self.p.b, self.p.rows, self.cfg.C)
        spread = np.exp2(_minmax(beta)) / np.sqrt(1.0 + info)
        if self.design == "adaptive":
            return spread
        w = np.concatenate([self.known_w, _top10_weights(beta)[None]], axis=0)
        return (w.std(axis=0) + w.mean(axis=0)) * spread

    def focused_round(self, priority: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        order = self._order(self.beta[:, : self.n])
        background = 0.0 if self.design == "pointwise_top" else cfg.background
        offset = hashed_uniform(self.w.seed, ROUNDING_STREAM, self.w.ids, self.round)
        games = demands(priority, order, self.n, background, cfg.cap, offset)
        return pair_by_demand(order, games, self.met, cfg.window, self.n // 2)

    def step(self, priority: np.ndarray | None) -> np.ndarray | None:
        """Play one round; returns the priority to reuse (replanning every few rounds)."""
        focused = self.design != "swiss" and (
            self.design == "pointwise_top" or self.round >= self.cfg.warmup
        )
        if not focused:
            rng = np.random.default_rng([self.w.seed, ROUND_STREAM, int(self.w.ids[0]), self.round])
            pairs = swiss_round(self.wins, self.met > 0, rng)
        else:
            since = self.round - (0 if self.design == "pointwise_top" else self.cfg.warmup)
            if priority is None or since % self.cfg.replan_every == 0:
                self.refit()
                priority = self.priority()
            pairs = self.focused_round(priority)
        self.play(pairs)
        self.round += 1
        return priority

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Play to the largest budget; returns ``{budget: (β (Qc, n), sampling variance)}``
        fitted on each query's first ``budget`` calls."""
        budgets = sorted(self.cfg.budgets)
        if self.design == "pointwise_top":
            self.grade()
        priority = None
        marks: dict[int, np.ndarray] = {}
        while True:
            before_rows, before_calls = self.p.rows.copy(), self.p.calls.copy()
            priority = self.step(priority)
            for budget in budgets:
                hit = (before_calls < budget) & (self.p.calls >= budget)
                if budget not in marks and hit.any():
                    marks[budget] = np.zeros(self.qc, dtype=np.int64)
                if budget in marks:
                    marks[budget] = np.where(
                        hit, before_rows + (budget - before_calls), marks[budget]
                    )
            if (self.p.calls >= budgets[-1]).all():
                break
            if self.round > 10 * budgets[-1] // max(1, self.n // 2):
                raise RuntimeError(f"{self.design}: the budget was not reached")
        self.p.rows_at_calls = marks
        return self.fits(budgets)

    def fits(self, budgets: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        out = {}
        start = None
        for budget in budgets:
            rows = self.p.rows_at_calls[budget]
            beta = bt.fit(self.p.a, self.p.b, self.p.y, rows, self.players, self.cfg.C, start)
            start = beta
            noise = bt.sandwich_variance(beta, self.p.a, self.p.b, rows, self.cfg.C)
            out[budget] = (beta[:, : self.n], noise[:, : self.n])
        return out

    def first_answer_share(self) -> float:
        """Share of pairwise calls won by the candidate shown first."""
        y = np.concatenate(self.p.first_wins) if self.p.first_wins else np.zeros(0)
        return float(y.mean()) if y.size else float("nan")
