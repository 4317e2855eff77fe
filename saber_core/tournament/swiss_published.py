"""docs/sabermath.md §10: the published Swiss tournament
(``build_benchmark/generate_scores/swiss_tour_run.py``,
``next_pairs``/``sort_pairs``/``run_swiss_tour`` and the driver loop; ``config.yaml``: 20 rounds).

Per query (a target) and round, with standings = wins so far (no bye points):

1. the candidate ids, in the query's candidate order, are shuffled with one Python
   ``random.Random`` shared by everything (published: the module-level ``random``, seeded 42 as an
   import side effect), then stably sorted by wins, **ascending**;
2. greedy: each not-yet-paired candidate takes the first later unpaired candidate it has not met
   (in either order); only the first 150 positions take part (hard-coded); a candidate with no
   partner **sits out** (fix ``sit_outs``: the left-over candidates are placed by the swap repair
   :func:`saber_core.tournament.swiss.repair_round`, only what it cannot place sits out);
3. a pair is stored as ``tuple(sorted(ids))``: ids are strings, so the lexicographically smaller
   id (``"10"`` before ``"9"``) is always Sample 1 (fix ``presentation``: a seeded random order
   per pair — ``np.random.default_rng([seed, PRESENTATION_STREAM, round, query])``, one draw per
   pair in formation order, so a round's orders never depend on other rounds or queries);
4. a pair counts as met once scheduled; the judge decides each pair, an unparsable answer or an
   error is retried once after the round's batch, a pair failing twice is dropped (no result, but
   still met); the winner gets +1.

Call order (the driver): queries are played ``batch_size`` = 200 at a time; for each batch, every
round shuffles the queries in order. (The published driver started at target 200,
``range(200, len, 200)``: pass ``candidate_ids[200:]`` to reproduce that run.) A shuffle
consumes the generator according to the list's length only, so every round's shuffled orders
follow from the pool sizes alone (:func:`published_orders`): a round can be paired on its own
(:func:`published_round`, what the build's round assets do) and still match the driver.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from saber_core.published import SWISS_BATCH, SWISS_ROUNDS, SWISS_SEED, SWISS_WINDOW
from saber_core.rating.comparisons import Comparisons
from saber_core.tournament.swiss import repair_round

PRESENTATION_STREAM = 10  # the presentation fix's generators: default_rng([seed, 10, r, q])

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


def published_orders(
    pool_sizes: Sequence[int],
    n_rounds: int = SWISS_ROUNDS,
    seed: int = SWISS_SEED,
    batch_size: int = SWISS_BATCH,
) -> list[list[list[int]]]:
    """``orders[r][q]``: query ``q``'s candidate positions as shuffled for round ``r`` by the
    published driver (one ``random.Random(seed)``; batches of ``batch_size`` queries, all rounds
    of a batch before the next), before the sort by wins."""
    shuffler = random.Random(seed)
    orders: list[list[list[int]]] = [[[] for _ in pool_sizes] for _ in range(n_rounds)]
    for first in range(0, len(pool_sizes), batch_size):
        for r in range(n_rounds):
            for q in range(first, min(first + batch_size, len(pool_sizes))):
                order = list(range(pool_sizes[q]))
                shuffler.shuffle(order)
                orders[r][q] = order
    return orders


@dataclass(frozen=True)
class PublishedRound:
    """One round for every query: ``pairs`` (Q, m, 2) positions as presented ``[Sample 1,
    Sample 2]`` in formation order (−1 = empty slot), ``reversed`` (Q, m) Sample 1 is the larger
    id (the presentation fix only), ``sat_out`` (Q, n) candidates without a game."""

    pairs: np.ndarray
    reversed: np.ndarray
    sat_out: np.ndarray


def published_round(
    round_index: int,
    orders: Sequence[Sequence[int]],
    wins: np.ndarray,
    met: np.ndarray,
    ids: Sequence[Sequence[str]],
    *,
    seed: int = SWISS_SEED,
    window: int = SWISS_WINDOW,
    sit_outs: bool = False,
    presentation: bool = False,
    query_numbers: Sequence[int] | None = None,
) -> PublishedRound:
    """Pair round ``round_index`` (0-based) of every query: ``orders[q]`` the round's shuffled
    positions (:func:`published_orders`), stably sorted by ``wins[q]`` ascending, then the greedy
    of :func:`pair_swiss_round` on ``met`` (Q, n, n); Sample 1 = the smaller id as a string, or
    (``presentation``) a seeded random side (module docstring), drawn by each query's number in
    the whole tournament (``query_numbers``; default its row)."""
    n_queries, n = wins.shape
    m = n // 2
    pairs = np.full((n_queries, m, 2), -1, dtype=np.int64)
    flipped = np.zeros((n_queries, m), dtype=bool)
    sat_out = np.zeros((n_queries, n), dtype=bool)
    for q in range(n_queries):
        order = sorted(orders[q], key=wins[q].tolist().__getitem__)
        formed, left = pair_swiss_round(order, met[q], window, sit_outs)
        sat_out[q, left] = True
        shown = [(x, y) if ids[q][x] < ids[q][y] else (y, x) for x, y in formed]
        if presentation and shown:
            number = query_numbers[q] if query_numbers is not None else q
            rng = np.random.default_rng([seed, PRESENTATION_STREAM, round_index, number])
            flip = rng.random(len(shown)) < 0.5
            shown = [(y, x) if f else (x, y) for (x, y), f in zip(shown, flip, strict=True)]
            flipped[q, : len(shown)] = flip
        if shown:
            pairs[q, : len(shown)] = shown
    return PublishedRound(pairs, flipped, sat_out)


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
    fixes. All randomness: ``random.Random(seed)`` (shuffles, :func:`published_orders`) and, for
    ``presentation``, one generator per round and query.
    """
    ids = _checked_ids(candidate_ids)
    n_queries = len(ids)
    n = max((len(pool) for pool in ids), default=0)
    m = n // 2
    orders = published_orders([len(pool) for pool in ids], n_rounds, seed, batch_size)
    wins = np.zeros((n_queries, n))
    met = np.zeros((n_queries, n, n), dtype=bool)
    pairs = np.full((n_rounds, n_queries, m, 2), -1, dtype=np.int64)
    flipped = np.zeros((n_rounds, n_queries, m), dtype=bool)
    outcomes = np.full((n_rounds, n_queries, m), np.nan)
    sat_out = np.zeros((n_rounds, n_queries, n), dtype=bool)
    for first_query in range(0, n_queries, batch_size):
        batch = np.arange(first_query, min(first_query + batch_size, n_queries))
        for r in range(n_rounds):
            played = published_round(
                r,
                [orders[r][q] for q in batch],
                wins[batch],
                met[batch],
                [ids[q] for q in batch],
                seed=seed,
                window=window,
                sit_outs=sit_outs,
                presentation=presentation,
            )
            sat_out[r, batch] = played.sat_out
            local, slots = np.nonzero(played.pairs[..., 0] >= 0)
            if not len(local):
                continue
            queries = batch[local]
            table = np.column_stack([queries, played.pairs[local, slots]])
            pairs[r, queries, slots] = table[:, 1:]
            flipped[r, queries, slots] = played.reversed[local, slots]
            met[queries, table[:, 1], table[:, 2]] = met[queries, table[:, 2], table[:, 1]] = True
            result = _judge_with_retry(judge, r, table)
            outcomes[r, queries, slots] = result
            decided = ~np.isnan(result)
            winner = np.where(result == 1.0, table[:, 1], table[:, 2])
            np.add.at(wins, (queries[decided], winner[decided]), 1.0)
    return PublishedSwissResult(pairs, flipped, outcomes, sat_out, wins)
