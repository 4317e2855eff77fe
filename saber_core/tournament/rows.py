"""Replaying some queries of a tournament exactly: every random draw of a round is made for
the whole tournament (``random((Q, ...))``) and the replay keeps its queries' rows, so the
replayed queries are paired and shown exactly as they were in the whole tournament — whatever
the other queries are (the published-defect audit's control replays the build this way)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Rows:
    """The rows ``index`` of a whole tournament of ``total`` queries that a replay plays: every
    draw is made for the whole tournament and the replay keeps its rows, so a replay of some
    queries pairs them exactly as the whole tournament did."""

    index: np.ndarray
    total: int

    def pick(self, draw: np.ndarray) -> np.ndarray:
        """The replay's rows of a draw made for the whole tournament."""
        return draw[self.index]


class RowsGenerator:
    """A generator that draws ``random((Q, ...))`` for the whole tournament and keeps the
    replay's rows (:class:`Rows`)."""

    def __init__(self, rng: np.random.Generator, rows: Rows) -> None:
        self.rng, self.rows = rng, rows

    def random(self, shape: tuple[int, ...]) -> np.ndarray:
        """The replay's rows of ``random((total, *shape[1:]))``."""
        return self.rows.pick(self.rng.random((self.rows.total, *shape[1:])))
