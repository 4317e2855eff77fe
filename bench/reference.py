"""Plain-Python references the benchmark checks the vectorized core against (and the unit
tests reuse as their brute forces): written from the method's definitions, one pair, one query,
one candidate at a time — slow on purpose, independent of ``saber_core``'s code."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from itertools import combinations


def float32(x: float) -> float:
    """Round a Python float to the nearest float32 (how the Lin table stores values)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def python_bma(anc: list[frozenset], ic: list[float]) -> Callable:
    """BMA-Lin straight from the definitions, one pair at a time (pure Python).

    Lin values are rounded to float32 like the stored Lin table; sums in Python floats.
    """

    def lin(a: int, b: int) -> float:
        if a == b:
            return 1.0
        denominator = ic[a] + ic[b]
        if denominator <= 0:
            return 0.0
        return float32(2.0 * max(ic[k] for k in anc[a] & anc[b]) / denominator)

    def bma(qa: list[int], qb: list[int]) -> float:
        if not qa or not qb:
            return 0.0
        rows = [max(lin(a, b) for b in qb) for a in qa]
        cols = [max(lin(a, b) for a in qa) for b in qb]
        return 0.5 * (sum(rows) / len(rows) + sum(cols) / len(cols))

    return bma


def python_quantile(sorted_values: list[float], q: float) -> float:
    """numpy's "linear" quantile of a sorted list, with numpy's lerp (pure Python)."""
    n = len(sorted_values)
    virtual = (n - 1) * q
    if virtual >= n - 1:
        return sorted_values[-1]
    lo = math.floor(virtual)
    a, b, t = sorted_values[lo], sorted_values[lo + 1], virtual - lo
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def python_pool(bma, jac, prob, config, tiebreak, query_doc) -> list[tuple[int, str]]:
    """select_pool's definition with lists and sorted() (no relax/skip: asserts the ok case)."""
    n = len(bma)
    eligible = [i for i in range(n) if prob[i] < config.near_duplicate_cut and i != query_doc]
    b_low = python_quantile(sorted(bma[i] for i in eligible), config.topic_low)
    b_high = python_quantile(sorted(bma[i] for i in eligible), config.topic_high)
    j_low = python_quantile(sorted(jac[i] for i in eligible), config.summary_low)
    j_high = python_quantile(sorted(jac[i] for i in eligible), config.summary_high)
    ranking = {
        "topic": lambda i: (-bma[i], tiebreak[i]),
        "summary": lambda i: (-jac[i], tiebreak[i]),
        "both": lambda i: (-(bma[i] + jac[i]), tiebreak[i]),
    }
    out = []
    for group, n_take in config.sizes.items():
        members = []
        for i in eligible:
            high_b, low_b = bma[i] >= b_high and bma[i] > b_low, bma[i] <= b_low
            high_j, low_j = jac[i] >= j_high and jac[i] > j_low, jac[i] <= j_low
            if (
                (group == "topic" and high_b and low_j)
                or (group == "summary" and high_j and low_b)
                or (group == "both" and high_b and high_j)
            ):
                members.append(i)
        members.sort(key=ranking[group])
        assert len(members) >= n_take, "the reference covers the strict case only"
        out += [(i, group) for i in members[:n_take]]
    return out


MASK = (1 << 64) - 1


def splitmix_py(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def pair_key(seed: int, q, a, b):
    return ((seed * 1_000_003 + q) * 1024 + a) * 1024 + b


def judge_py(strength: list[float], seed: int, q: int, a: int, b: int) -> float:
    """Simulated judge for one pair (a < b): a wins iff s_a − s_b + logistic noise > 0."""
    u = ((splitmix_py(pair_key(seed, q, a, b) & MASK) >> 11) + 0.5) / 2.0**53
    return 1.0 if strength[a] - strength[b] + math.log(u / (1.0 - u)) > 0 else 0.0


def greedy_pairs(
    order: Sequence[int], is_met: Callable[[int, int], bool]
) -> tuple[list[tuple[int, int]], list[int]]:
    """The SPEC's greedy for one query: in ``order``, each unpaired player ``p`` takes the first
    later unpaired player ``q`` it has not met; returns the pairs ``(p, q)`` in formation order
    and the players left over."""
    unpaired = list(order)
    pairs, left = [], []
    while unpaired:
        p = unpaired.pop(0)
        for q in unpaired:
            if not is_met(p, q):
                unpaired.remove(q)
                pairs.append((p, q))
                break
        else:
            left.append(p)
    return pairs, left


def repair_left_overs(
    pairs: list[tuple[int, int]], left: list[int], is_met: Callable[[int, int], bool]
) -> None:
    """Place left-over players two at a time by a swap with the nearest earlier pair
    (``p-a`` and ``q-b``, or ``p-b`` and ``q-a``, both unmet); in place."""
    left.sort()  # left-over players are tried in id order
    progress = True
    while len(left) >= 2 and progress:
        progress = False
        for p, q in combinations(left, 2):
            for k in range(len(pairs) - 1, -1, -1):
                a, b = pairs[k]
                if not is_met(p, a) and not is_met(q, b):
                    pairs[k], new = (p, a), (q, b)
                elif not is_met(p, b) and not is_met(q, a):
                    pairs[k], new = (p, b), (q, a)
                else:
                    continue
                pairs.append(new)
                left.remove(p)
                left.remove(q)
                progress = True
                break
            if progress:
                break


def python_swiss(keys: list[list[float]], judge: Callable, n: int, rounds: int):
    """The SPEC Swiss tournament for one query, pure Python (greedy next-unmet + swap repair);
    ``keys[r]`` are round ``r``'s random tie-break keys, ``judge(a, b)`` the outcome of a < b."""
    wins = [0] * n
    met: set[tuple[int, int]] = set()

    def is_met(x: int, y: int) -> bool:
        return (min(x, y), max(x, y)) in met

    log = []
    for r in range(rounds):
        order = sorted(range(n), key=lambda i: (-wins[i], keys[r][i]))
        pairs, left = greedy_pairs(order, is_met)
        repair_left_overs(pairs, left, is_met)
        played = []
        for x, y in pairs:
            a, b = min(x, y), max(x, y)
            outcome = judge(a, b)
            met.add((a, b))
            wins[a if outcome == 1.0 else b] += 1
            played.append((a, b, outcome))
        log.append(played)
    return log


def python_ndcg(scores: Sequence[float], ratings: Sequence[float], k: int) -> float:
    """nDCG@k of one query: rank by descending score (NaN last, ties by column), gain
    2^rel − 1, discount 1/log2(rank + 1), ideal DCG over all candidates; 0 when it is 0."""
    order = sorted(
        range(len(scores)),
        key=lambda j: (math.isnan(scores[j]), 0.0 if math.isnan(scores[j]) else -scores[j], j),
    )
    dcg = sum((2.0 ** ratings[i] - 1.0) / math.log2(r + 2) for r, i in enumerate(order[:k]))
    ideal = sorted(ratings, reverse=True)
    idcg = sum((2.0**g - 1.0) / math.log2(r + 2) for r, g in enumerate(ideal[:k]))
    return dcg / idcg if idcg > 0 else 0.0


def set_jaccard(a: frozenset | set, b: frozenset | set) -> float:
    """|A ∩ B| / |A ∪ B| of two token sets (0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def python_sabermath_pair(
    tags_a: Sequence[int],
    tags_b: Sequence[int],
    ancestors: Sequence[Sequence[int]],
    ic: Sequence[float],
    tokens_a: set,
    tokens_b: set,
) -> tuple[float, float]:
    """The published pooled BMA-Lin and idea Jaccard of one pair, before float16 storage
    (docs/sabermath.md §4–§6): Lin through the longest common ancestor path, the diagonal
    2IC/(2IC + 1e-12); two sums from 0.0 divided separately by |A| + |B|; J(∅, ∅) = 1."""

    def lin(a: int, b: int) -> float:
        common = -1
        for x, y in zip(ancestors[a], ancestors[b], strict=False):
            if x != y:
                break
            common = x
        return (2.0 * ic[common]) / ((ic[a] + ic[b]) + 1e-12)

    bma = 0.0
    if tags_a and tags_b:
        n = len(tags_a) + len(tags_b)
        first = 0.0
        for a in tags_a:
            first += max(lin(a, b) for b in tags_b)
        second = 0.0
        for b in tags_b:
            second += max(lin(b, a) for a in tags_a)
        bma = first / n + second / n
    union = tokens_a | tokens_b
    jaccard = len(tokens_a & tokens_b) / len(union) if union else 1.0
    return bma, jaccard
