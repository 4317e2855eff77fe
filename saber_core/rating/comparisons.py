"""Pairwise comparisons as flat rows — the one currency of the tournament, Bradley–Terry and
validity code.

A :class:`Comparisons` holds the judgments of ``n_queries`` queries over ``n_players`` candidates
each: row ``r`` says that in query ``q[r]`` candidate ``a[r]`` (shown first) met ``b[r]`` with
outcome ``y[r]`` = P(``a`` beats ``b``) ∈ [0, 1] — hard 1/0 or a judge's soft probability — and
NaN when the judgment was dropped (or not made yet).

A :class:`PlayedRounds` is what a tournament stored: per row the hard outcome (1 = ``a`` won,
0 = ``b`` won, NaN = dropped) *and* the judge's probability ``p_a``, so Bradley–Terry can be fitted
on either (:meth:`PlayedRounds.comparisons`), and the Swiss standings (wins, who met whom) follow
from it (:meth:`PlayedRounds.standings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl


def hard_outcomes(p_first: np.ndarray) -> np.ndarray:
    """``1[p > ½]``, ``0[p < ½]``, NaN where p = ½ or NaN: a judge probability as a verdict."""
    p = np.asarray(p_first, dtype=float)
    return np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, np.nan))


def soft_outcomes(p_first: np.ndarray) -> np.ndarray:
    """The judge's probabilities as soft outcomes, NaN wherever the verdict was dropped
    (no answer, or a tie p = ½): the same judgments count as :func:`hard_outcomes` keeps."""
    p = np.asarray(p_first, dtype=float)
    return np.where(np.isnan(hard_outcomes(p)), np.nan, p)


@dataclass(frozen=True)
class Comparisons:
    """Flat pairwise rows ``(q, a, b, y)`` for ``n_queries`` × ``n_players`` (module docstring)."""

    q: np.ndarray
    a: np.ndarray
    b: np.ndarray
    y: np.ndarray
    n_queries: int
    n_players: int

    def __post_init__(self) -> None:
        for name in ("q", "a", "b"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), np.int64).reshape(-1))
        object.__setattr__(self, "y", np.asarray(self.y, dtype=float).reshape(-1))
        if not len(self.q) == len(self.a) == len(self.b) == len(self.y):
            raise ValueError(
                f"q, a, b and y must have one entry per row, got lengths "
                f"{[len(self.q), len(self.a), len(self.b), len(self.y)]}"
            )

    def __len__(self) -> int:
        return len(self.q)

    @classmethod
    def empty(cls, n_queries: int, n_players: int) -> Comparisons:
        """No rows."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none, none, np.zeros(0), n_queries, n_players)

    @classmethod
    def concat(cls, parts: Sequence[Comparisons]) -> Comparisons:
        """The rows of ``parts`` (same sizes) one after another."""
        if not parts:
            raise ValueError("concat needs at least one Comparisons")
        sizes = {(p.n_queries, p.n_players) for p in parts}
        if len(sizes) != 1:
            raise ValueError(f"cannot concatenate comparisons of different sizes {sorted(sizes)}")
        nq, n = sizes.pop()
        cols = [np.concatenate([getattr(p, c) for p in parts]) for c in ("q", "a", "b", "y")]
        return cls(*cols, nq, n)

    @property
    def decided(self) -> np.ndarray:
        """Rows with an outcome (not NaN)."""
        return np.isfinite(self.y)

    def with_outcomes(self, y: np.ndarray) -> Comparisons:
        """The same pairs with outcomes ``y``."""
        return Comparisons(self.q, self.a, self.b, y, self.n_queries, self.n_players)

    def select(self, rows: np.ndarray) -> Comparisons:
        """A subset of the rows (boolean mask or indices), sizes unchanged."""
        return Comparisons(
            self.q[rows], self.a[rows], self.b[rows], self.y[rows], self.n_queries, self.n_players
        )

    def validate(self) -> None:
        """ValueError naming the first bad row and field: indices out of range, a self-pair,
        or an outcome outside [0, 1]."""
        for name, values, bound in (
            ("q", self.q, self.n_queries),
            ("a", self.a, self.n_players),
            ("b", self.b, self.n_players),
        ):
            bad = np.flatnonzero((values < 0) | (values >= bound))
            if bad.size:
                r = int(bad[0])
                raise ValueError(f"row {r}: field '{name}' = {values[r]} is outside [0, {bound})")
        bad = np.flatnonzero(self.a == self.b)
        if bad.size:
            r = int(bad[0])
            raise ValueError(f"row {r}: field 'b' equals field 'a' (= {self.a[r]}): a self-pair")
        y = self.y
        bad = np.flatnonzero(~np.isnan(y) & ((y < 0.0) | (y > 1.0)))
        if bad.size:
            r = int(bad[0])
            raise ValueError(f"row {r}: field 'y' = {y[r]} is outside [0, 1]")

    def games(self) -> np.ndarray:
        """Decided games per candidate, (Q, n)."""
        out = np.zeros((self.n_queries, self.n_players))
        d = self.decided
        np.add.at(out, (self.q[d], self.a[d]), 1.0)
        np.add.at(out, (self.q[d], self.b[d]), 1.0)
        return out


@dataclass(frozen=True)
class PlayedRounds:
    """A tournament's stored judgments: pairs, hard ``outcome`` (1/0/NaN) and judge ``p_a``."""

    q: np.ndarray
    a: np.ndarray
    b: np.ndarray
    outcome: np.ndarray
    p_a: np.ndarray
    n_queries: int
    n_players: int

    @classmethod
    def from_frame(
        cls, table: pl.DataFrame | None, query_ids: Sequence[str], n_players: int
    ) -> PlayedRounds:
        """A judgments table (``query_id, pos_a, pos_b, outcome, p_a``; a round's or all rounds)
        as arrays, row order kept; ``query_ids`` gives the query index."""
        nq = len(query_ids)
        if table is None or table.height == 0:
            none = np.zeros(0, dtype=np.int64)
            return cls(none, none, none, np.zeros(0), np.zeros(0), nq, n_players)
        index = {qid: i for i, qid in enumerate(query_ids)}
        return cls(
            np.array([index[x] for x in table["query_id"].to_list()], dtype=np.int64),
            table["pos_a"].to_numpy().astype(np.int64),
            table["pos_b"].to_numpy().astype(np.int64),
            table["outcome"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
            table["p_a"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
            nq,
            n_players,
        )

    def comparisons(self, soft: bool) -> Comparisons:
        """Bradley–Terry input: ``y = p_a`` when ``soft`` (NaN where the hard outcome was
        dropped too), else the hard outcome."""
        y = np.where(np.isnan(self.outcome), np.nan, self.p_a) if soft else self.outcome
        return Comparisons(self.q, self.a, self.b, y, self.n_queries, self.n_players)

    def standings(self) -> tuple[np.ndarray, np.ndarray]:
        """Wins (Q, n) and the met-matrix (Q, n, n) these judgments add up to (a dropped
        judgment counts as met and adds no win)."""
        q, a, b, outcome = self.q, self.a, self.b, self.outcome
        wins = np.zeros((self.n_queries, self.n_players))
        met = np.zeros((self.n_queries, self.n_players, self.n_players), dtype=bool)
        met[q, a, b] = met[q, b, a] = True
        np.add.at(wins, (q[outcome == 1.0], a[outcome == 1.0]), 1.0)
        np.add.at(wins, (q[outcome == 0.0], b[outcome == 0.0]), 1.0)
        return wins, met
