"""§10 the published Swiss tournament (``build_benchmark/generate_scores/swiss_tour_run.py``,
``next_pairs``/``sort_pairs``/``run_swiss_tour`` and the driver loop; ``config.yaml``: 20 rounds).

Per query (a target) and round, with standings = wins so far (no bye points):

1. the candidate ids, in the query's candidate order, are shuffled with one Python
   ``random.Random`` shared by everything (published: the module-level ``random``, seeded 42 as an
   import side effect), then stably sorted by wins, **ascending**;
2. greedy: each not-yet-paired candidate takes the first later unpaired candidate it has not met
   (in either order); only the first 150 positions take part (hard-coded); a candidate with no
   partner **sits out** (fix ``sit_outs``: the left-over candidates are placed by the swap repair
   :func:`saber_core.tournament.repair_round`, only what it cannot place sits out);
3. a pair is stored as ``tuple(sorted(ids))``: ids are strings, so the lexicographically smaller
   id (``"10"`` before ``"9"``) is always Sample 1 (fix ``presentation``: a seeded random order
   per pair, drawn from ``np.random.default_rng(seed)`` in scheduling order);
4. a pair counts as met once scheduled; the judge decides each pair, an unparsable answer or an
   error is retried once after the round's batch, a pair failing twice is dropped (no result, but
   still met); the winner gets +1.

Call order (the driver): queries are played ``batch_size`` = 200 at a time; for each batch, every
round shuffles the queries in order. (The published driver started at target 200,
``range(200, len, 200)``: pass ``candidate_ids[200:]`` to reproduce that run.)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from saber_core.comparisons import Comparisons
from saber_core.sabermath.options import SWISS_BATCH, SWISS_ROUNDS, SWISS_SEED, SWISS_WINDOW
from saber_core.tournament import repair_round

SwissJudge = Callable[[int, int, np.ndarray], np.ndarray]
"""``judge(round, attempt, matches)``: ``matches`` (k, 3) int64 rows ``(query, sample 1,
sample 2)`` (candidate positions within the query), ``attempt`` 0 or 1 (the retry); returns (k,)
float: 1.0 = Sample 1 won, 0.0 = Sample 2 won, NaN = unparsable answer or error."""


@dataclass(frozen=True)
class PublishedSwissResult:
    """A finished tournament (candidate positions within each query).

    ``pairs`` (R, Q, m, 2) int64 as presented, ``[Sample 1, Sample 2]``, in formation order,
    ``-1`` for an empty slot; ``reversed`` (R, Q, m) bool: Sample 1 is the lexicographically
    larger id (only with the ``presentation`` fix); ``outcomes`` (R, Q, m): 1.0 = Sample 1 won,
    0.0 = Sample 2 won, NaN = dropped or empty; ``sat_out`` (R, Q, n) bool candidates without a
    game; ``wins`` (Q, n) final win counts. ``n`` is the largest pool, ``m = n // 2``.
    """

    pairs: np.ndarray
    reversed: np.ndarray
    outcomes: np.ndarray
    sat_out: np.ndarray
    wins: np.ndarray

    @property
    def sit_out_counts(self) -> np.ndarray:
        """Candidates without a game, (R, Q)."""
        return self.sat_out.sum(axis=2)

    def comparisons(self) -> Comparisons:
        """The scheduled pairs as flat rows, round by round: ``a`` = Sample 1, ``b`` = Sample 2,
        ``y`` = 1.0 if Sample 1 won, 0.0 if Sample 2 won, NaN if dropped (kept, so callers can
        count them)."""
        filled = self.pairs[..., 0] >= 0
        _, query, _ = np.nonzero(filled)
        chosen = self.pairs[filled]
        n_queries, n_players = self.wins.shape
        return Comparisons(
            query, chosen[:, 0], chosen[:, 1], self.outcomes[filled], n_queries, n_players
        )


def pair_swiss_round(
    order: Sequence[int], met: np.ndarray, window: int = SWISS_WINDOW, sit_outs: bool = False
) -> tuple[list[tuple[int, int]], list[int]]:
    """One query's round from its pairing ``order`` (candidate positions, already shuffled and
    sorted) and ``met`` (n, n) bool: the pairs ``(player, opponent)`` in formation order and the
    candidates left without a game (module docstring, step 2; ``sit_outs`` = the fix)."""
    limit = min(len(order), window)
    used: set[int] = set()
    formed: list[tuple[int, int]] = []
    left: list[int] = []
    for i in range(limit):
        player = order[i]
        if player in used:
            continue
        for opponent in order[i + 1 : limit]:
            if opponent not in used and not met[player, opponent]:
                formed.append((player, opponent))
                used.update((player, opponent))
                break
        else:
            left.append(player)
    if sit_outs and len(left) >= 2:
        slots = np.full((len(order) // 2, 2), -1, dtype=np.int64)
        slots[: len(formed)] = formed
        count = repair_round(slots, len(formed), left, met)  # removes the placed from ``left``
        formed = [(int(x), int(y)) for x, y in slots[:count]]
    return formed, left + list(order[limit:])


def _judge_with_retry(judge: SwissJudge, round_index: int, matches: np.ndarray) -> np.ndarray:
    """Outcomes of ``matches`` after one retry of the failed ones (NaN = dropped)."""
    outcomes = _checked(judge(round_index, 0, matches.copy()), len(matches), round_index)
    failed = np.flatnonzero(np.isnan(outcomes))
    if failed.size:
        retried = judge(round_index, 1, matches[failed].copy())
        outcomes[failed] = _checked(retried, failed.size, round_index)
    return outcomes


def _checked(outcomes: np.ndarray, k: int, round_index: int) -> np.ndarray:
    out = np.array(outcomes, dtype=np.float64).reshape(-1)
    if out.shape != (k,):
        raise ValueError(
            f"judge returned {out.shape[0]} outcomes for {k} matches in round {round_index}"
        )
    bad = ~np.isnan(out) & (out != 0.0) & (out != 1.0)
    if bad.any():
        raise ValueError(
            f"judge outcome {out[bad][0]!r} in round {round_index}: need 1.0, 0.0 or NaN"
        )
    return out


def _checked_ids(candidate_ids: Sequence[Sequence[str]]) -> list[list[str]]:
    ids = [list(pool) for pool in candidate_ids]
    for q, pool in enumerate(ids):
        for value in pool:
            if not isinstance(value, str):
                raise TypeError(f"query {q}: candidate id {value!r} is not a string")
        if len(set(pool)) != len(pool):
            raise ValueError(f"query {q}: candidate ids repeat")
    return ids


def play_published_swiss(
    candidate_ids: Sequence[Sequence[str]],
    judge: SwissJudge,
    n_rounds: int = SWISS_ROUNDS,
    seed: int = SWISS_SEED,
    batch_size: int = SWISS_BATCH,
    window: int = SWISS_WINDOW,
    sit_outs: bool = False,
    presentation: bool = False,
) -> PublishedSwissResult:
    """Play ``n_rounds`` rounds for every query (``candidate_ids[q]``: its candidates' string ids
    in candidate order) with the published rules and call order (module docstring).

    ``judge`` is called once per batch and round with all scheduled matches (attempt 0), then with
    the failed ones (attempt 1); see :data:`SwissJudge`. ``sit_outs`` and ``presentation`` are the
    fixes. All randomness: ``random.Random(seed)`` (shuffles) and, for ``presentation``,
    ``np.random.default_rng(seed)`` (orders).
    """
    ids = _checked_ids(candidate_ids)
    n_queries = len(ids)
    n = max((len(pool) for pool in ids), default=0)
    m = n // 2
    shuffler = random.Random(seed)
    orderer = np.random.default_rng(seed)
    wins = np.zeros((n_queries, n))
    met = np.zeros((n_queries, n, n), dtype=bool)
    pairs = np.full((n_rounds, n_queries, m, 2), -1, dtype=np.int64)
    flipped = np.zeros((n_rounds, n_queries, m), dtype=bool)
    outcomes = np.full((n_rounds, n_queries, m), np.nan)
    sat_out = np.zeros((n_rounds, n_queries, n), dtype=bool)
    for first_query in range(0, n_queries, batch_size):
        batch = range(first_query, min(first_query + batch_size, n_queries))
        for r in range(n_rounds):
            scheduled: list[tuple[int, int, int, int]] = []  # (query, slot, sample 1, sample 2)
            for q in batch:
                order = list(range(len(ids[q])))
                shuffler.shuffle(order)
                order.sort(key=wins[q].tolist().__getitem__)
                formed, left = pair_swiss_round(order, met[q], window, sit_outs)
                sat_out[r, q, left] = True
                for slot, (x, y) in enumerate(formed):
                    met[q, x, y] = met[q, y, x] = True
                    scheduled.append((q, slot, *((x, y) if ids[q][x] < ids[q][y] else (y, x))))
            if not scheduled:
                continue
            table = np.array(scheduled, dtype=np.int64)
            queries, slots = table[:, 0], table[:, 1]
            if presentation:
                flip = orderer.random(len(table)) < 0.5
                table[flip, 2:] = table[flip, 3:1:-1]
                flipped[r, queries, slots] = flip
            pairs[r, queries, slots] = table[:, 2:]
            result = _judge_with_retry(judge, r, table[:, [0, 2, 3]])
            outcomes[r, queries, slots] = result
            decided = ~np.isnan(result)
            winner = np.where(result == 1.0, table[:, 2], table[:, 3])
            np.add.at(wins, (queries[decided], winner[decided]), 1.0)
    return PublishedSwissResult(pairs, flipped, outcomes, sat_out, wins)
