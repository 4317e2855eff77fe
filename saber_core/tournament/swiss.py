"""Swiss tournaments over candidates, batched over queries (SPEC "Stage 4").

Shapes: ``Q`` queries, ``n`` candidates (players) per query, ``m = n // 2`` pairing slots per
round, ``R`` rounds. A slot that holds no pair is ``(-1, -1)``.

Pairing rule (per query): order the players by current wins, descending, ties in a uniformly
random order; then repeatedly take the first unpaired player ``p`` and pair it with the next
unpaired player after it that ``p`` has not met. A player that finds no partner is left over;
two left-over players ``p, q`` are repaired by a swap with the nearest earlier pair ``(a, b)``
(``p-a`` and ``q-b``, or ``p-b`` and ``q-a``, both unmet). Only a player that cannot be placed
this way (or the odd player when ``n`` is odd) gets a bye; a bye awards no win. No pair ever
meets twice, and every pair is written with the smaller candidate id first (it is judged once,
in candidate-id order).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from saber_core.rating.comparisons import Comparisons

Judge = Callable[[int, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class SwissResult:
    """A finished tournament.

    ``pairs`` (R, Q, m, 2) int, smaller id first, ``-1`` for an empty slot; ``outcomes`` (R, Q, m)
    float: 1.0 = first (smaller-id) candidate won, 0.0 = second won, NaN = dropped judgment or empty
    slot; ``wins`` (Q, n) float final win counts; ``byes`` (R, Q) int players without a game.
    """

    pairs: np.ndarray
    outcomes: np.ndarray
    wins: np.ndarray
    byes: np.ndarray

    def comparisons(self) -> Comparisons:
        """The played pairs as flat rows (round by round), outcome 1.0 if ``a`` (the smaller id)
        won, 0.0 if ``b`` won. Empty slots are dropped; NaN outcomes (dropped judgments) are
        KEPT so callers can count them (Bradley–Terry ignores them)."""
        valid = self.pairs[..., 0] >= 0
        _, qi, _ = np.nonzero(valid)
        sel = self.pairs[valid]
        nq, n = self.wins.shape
        return Comparisons(qi, sel[:, 0], sel[:, 1], self.outcomes[valid], nq, n)

    def rounds_of_rows(self) -> np.ndarray:
        """0-based round of each row of :meth:`comparisons`."""
        return np.nonzero(self.pairs[..., 0] >= 0)[0]


def _check_state(wins: np.ndarray, met: np.ndarray) -> tuple[int, int]:
    if wins.ndim != 2:
        raise ValueError(f"wins must be (Q, n), got shape {wins.shape}")
    q, n = wins.shape
    if met.shape != (q, n, n):
        raise ValueError(f"met must be (Q, n, n) = {(q, n, n)}, got shape {met.shape}")
    return q, n


def swiss_order(wins: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per query, player ids sorted by wins descending, ties in random order; (Q, n) int.

    Draws exactly one ``rng.random((Q, n))`` array of tie-break keys: the order is
    ``lexsort((keys, -wins))`` — primary key ``-wins``, secondary key the random draw.
    """
    wins = np.asarray(wins, dtype=float)
    keys = rng.random(wins.shape)
    return np.lexsort((keys, -wins), axis=-1)


def _first_free(
    free: np.ndarray,
    order: np.ndarray,
    met: np.ndarray,
    r: np.ndarray,
    start: np.ndarray,
    p: np.ndarray | None = None,
    window: int = 8,
) -> np.ndarray:
    """For each query ``r``: first position >= ``start`` that is free (and unmet by ``p``).

    Returns ``n`` where there is none. Looks at a short window first (the common case), then at
    the whole row for the few queries that need it.
    """
    n = free.shape[1]
    pos = start[:, None] + np.arange(window)
    inside = pos < n
    flat = r[:, None] * n + np.minimum(pos, n - 1)  # flat index into (Q, n) arrays
    ok = inside & free.ravel()[flat]
    if p is not None:
        ok &= ~met.ravel()[(r * n + p)[:, None] * n + order.ravel()[flat]]
    found = np.where(ok.any(axis=1), start + ok.argmax(axis=1), n)
    slow = np.flatnonzero((found == n) & (start + window < n))
    if slow.size:
        r2 = r[slow]
        ok = free[r2] & (np.arange(n) >= start[slow, None] + window)
        if p is not None:
            ok &= ~np.take_along_axis(met[r2, p[slow]], order[r2], axis=1)
        found[slow] = np.where(ok.any(axis=1), ok.argmax(axis=1), n)
    return found


def _greedy_in_order(order: np.ndarray, met: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized greedy pass over the Q axis; returns (pairs (Q, m, 2), left over (Q, n) bool).

    One step handles one ``p`` per query: ``p`` = first free position, ``q`` = first free position
    after it with ``met[p, q]`` false. Pairs are stored in formation order, not yet id-sorted.
    """
    nq, n = order.shape
    pairs = np.full((nq, n // 2, 2), -1, dtype=np.int64)
    count = np.zeros(nq, dtype=np.int64)
    free = np.ones((nq, n), dtype=bool)  # indexed by position in ``order``
    left = np.zeros((nq, n), dtype=bool)  # indexed by player id
    head = np.zeros(nq, dtype=np.int64)  # first free position, n when none
    if n == 0:
        return pairs, left
    while True:
        r = np.flatnonzero(head < n)
        if r.size == 0:
            break
        h = head[r]
        p = order[r, h]
        free[r, h] = False
        c = _first_free(free, order, met, r, h + 1, p)
        ok = c < n
        rk, ck = r[ok], c[ok]
        pairs[rk, count[rk], 0] = p[ok]
        pairs[rk, count[rk], 1] = order[rk, ck]
        free[rk, ck] = False
        count[rk] += 1
        left[r[~ok], p[~ok]] = True
        head[r] = _first_free(free, order, met, r, h + 1)
    return pairs, left


def repair_round(pairs: np.ndarray, count: int, leftover: list[int], met: np.ndarray) -> int:
    """Place left-over players of one query into ``pairs`` (m, 2) in place; returns new count.

    Two left-over players ``p, q`` have always met (else the greedy would have paired them), so
    swap with the nearest earlier pair ``(a, b)`` (scanning back from the last one formed) such
    that ``p-a, q-b`` or ``p-b, q-a`` are unmet: ``(a, b)`` becomes ``(p, a), (q, b)`` (or crossed).
    """
    progress = True
    while len(leftover) >= 2 and progress:
        progress = False
        for p, q in combinations(leftover, 2):
            a, b = pairs[:count, 0], pairs[:count, 1]
            straight = ~met[p, a] & ~met[q, b]
            crossed = ~met[p, b] & ~met[q, a]
            fits = np.flatnonzero(straight | crossed)
            if fits.size == 0:
                continue
            k = int(fits[-1])
            x, y = (a[k], b[k]) if straight[k] else (b[k], a[k])
            pairs[k] = p, x
            pairs[count] = q, y
            count += 1
            leftover.remove(p)
            leftover.remove(q)
            progress = True
            break
    return count


def _pair_in_order(order: np.ndarray, met: np.ndarray, repair: bool = True) -> np.ndarray:
    """Pair players given the pairing order (Q, n); returns (Q, n // 2, 2), smaller id first.

    Greedy pass (vectorized over queries), then the swap repair (a per-query loop, only for the
    queries with two or more left-over players), then each pair is id-sorted; unfilled slots are
    ``(-1, -1)``.
    """
    order = np.ascontiguousarray(order, dtype=np.int64)
    met = np.ascontiguousarray(met, dtype=bool)
    pairs, left = _greedy_in_order(order, met)
    if repair:
        counts = (pairs[..., 0] >= 0).sum(axis=1)
        for qi in np.flatnonzero(left.sum(axis=1) >= 2):
            leftover = [int(x) for x in np.flatnonzero(left[qi])]
            repair_round(pairs[qi], int(counts[qi]), leftover, met[qi])
    return np.sort(pairs, axis=-1)  # smaller id first; empty slots stay (-1, -1)


def swiss_round(wins: np.ndarray, met: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pair one Swiss round for every query; returns (Q, n // 2, 2) int, ``-1`` = empty slot.

    ``wins`` (Q, n) current win counts, ``met`` (Q, n, n) bool who has already played whom.
    Order = :func:`swiss_order` (wins descending, random ties); pairing = greedy next-unmet with
    swap repair (module docstring).
    """
    _check_state(np.asarray(wins), np.asarray(met))
    return _pair_in_order(swiss_order(wins, rng), np.asarray(met, dtype=bool))


def _check_outcomes(pairs: np.ndarray, outcomes: np.ndarray) -> None:
    valid = pairs[..., 0] >= 0
    o = outcomes
    bad = valid & ~(np.isnan(o) | (o == 0.0) | (o == 1.0))
    if bad.any():
        qi, slot = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(
            f"outcome at (query {qi}, slot {slot}) is {o[qi, slot]!r}; must be 0.0, 1.0 or NaN"
        )


def _update_inplace(
    wins: np.ndarray, met: np.ndarray, pairs: np.ndarray, outcomes: np.ndarray
) -> None:
    """Mark filled pairs as met both ways and add the decided wins (C-contiguous inputs)."""
    nq, n = wins.shape
    valid = pairs[..., 0] >= 0
    qi = np.nonzero(valid)[0]
    a, b = pairs[valid, 0], pairs[valid, 1]
    flat = met.reshape(-1)
    flat[(qi * n + a) * n + b] = True
    flat[(qi * n + b) * n + a] = True
    o = outcomes[valid]
    winner = np.where(o == 1.0, a, b)[~np.isnan(o)]
    wins += np.bincount(qi[~np.isnan(o)] * n + winner, minlength=nq * n).reshape(nq, n)


def update_standings(
    wins: np.ndarray, met: np.ndarray, pairs: np.ndarray, outcomes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Record one round; returns NEW ``(wins, met)`` arrays (the inputs are not modified).

    ``outcomes`` (Q, m): 1.0 = first (smaller-id) candidate won, 0.0 = second won, NaN = dropped
    judgment. Every filled slot marks the pair as met both ways (a dropped judgment too, so it is
    never replayed); the winner gains 1 win, a dropped judgment none. Outcomes in empty slots are
    ignored; any other value than 0, 1 or NaN raises ValueError naming (query, slot).
    """
    wins = np.array(wins, dtype=float)
    met = np.array(met, dtype=bool)
    pairs = np.asarray(pairs, dtype=np.int64)
    outcomes = np.asarray(outcomes, dtype=float)
    nq, n = _check_state(wins, met)
    if pairs.shape != (nq, n // 2, 2) or outcomes.shape != pairs.shape[:2]:
        raise ValueError(
            f"pairs must be {(nq, n // 2, 2)} and outcomes {(nq, n // 2)}, "
            f"got {pairs.shape} and {outcomes.shape}"
        )
    _check_outcomes(pairs, outcomes)
    _update_inplace(wins, met, pairs, outcomes)
    return wins, met


def run_swiss(
    n_queries: int, n_players: int, n_rounds: int, judge: Judge, seed: int
) -> SwissResult:
    """Play ``n_rounds`` Swiss rounds for ``n_queries`` queries of ``n_players`` candidates.

    ``judge(round, pairs)`` gets all queries' pairs (Q, m, 2) at once (``-1`` rows are empty slots,
    their outcomes are ignored) and returns outcomes (Q, m) in {0, 1, NaN} as in
    :func:`update_standings`. All randomness comes from ``np.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    nq, n, m = n_queries, n_players, n_players // 2
    wins = np.zeros((nq, n))
    met = np.zeros((nq, n, n), dtype=bool)
    all_pairs = np.full((n_rounds, nq, m, 2), -1, dtype=np.int64)
    all_out = np.full((n_rounds, nq, m), np.nan)
    byes = np.zeros((n_rounds, nq), dtype=np.int64)
    for r in range(n_rounds):
        pairs = _pair_in_order(swiss_order(wins, rng), met)
        out = np.asarray(judge(r, pairs.copy()), dtype=float)
        if out.shape != (nq, m):
            raise ValueError(f"judge returned shape {out.shape} in round {r}, expected {(nq, m)}")
        out = np.where(pairs[..., 0] >= 0, out, np.nan)
        _check_outcomes(pairs, out)
        _update_inplace(wins, met, pairs, out)
        all_pairs[r], all_out[r] = pairs, out
        byes[r] = n - 2 * (pairs[..., 0] >= 0).sum(axis=1)
    return SwissResult(pairs=all_pairs, outcomes=all_out, wins=wins, byes=byes)


def round_robin_pairs(n: int) -> np.ndarray:
    """All ``n (n - 1) / 2`` pairs ``(i, j)`` with ``i < j``, lexicographic; (n(n-1)/2, 2) int."""
    i, j = np.triu_indices(n, k=1)
    return np.stack([i, j], axis=1).astype(np.int64)


def round_robin_schedule(n: int) -> np.ndarray:
    """Circle-method schedule; (rounds, n // 2, 2) int, smaller id first.

    Every player plays once per round and every pair exactly once overall: ``n - 1`` rounds for
    even ``n``; for odd ``n`` a phantom player is added, giving ``n`` rounds with one bye each.
    """
    size = n + (n % 2)
    if size < 2:
        return np.zeros((0, n // 2, 2), dtype=np.int64)
    rounds = []
    ring = list(range(size))
    for _ in range(size - 1):
        games = [sorted((ring[k], ring[size - 1 - k])) for k in range(size // 2)]
        rounds.append([g for g in games if g[1] < n])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return np.array(rounds, dtype=np.int64).reshape(size - 1, n // 2, 2)
