"""Query sampling and candidate-pool selection (topic-only / summary-only / both).

For one query with BMA scores ``b`` and summary-Jaccard scores ``j`` against every document:

* eligible documents exclude the query itself and its near-duplicates
  (problem-text Jaccard ≥ ``near_duplicate_cut``);
* per signal, thresholds ``t_high`` and ``t_low`` are either absolute values or quantiles of the
  eligible documents' scores (``threshold_mode``); a score is *high* when ``s ≥ t_high`` and
  ``s > t_low``, *low* when ``s ≤ t_low`` (so high and low never overlap, even with ties);
* topic-only = high BMA and low Jaccard, ranked by BMA; summary-only = high Jaccard and low BMA,
  ranked by Jaccard; both = high on both, ranked by ``b + j``. The three groups are disjoint.
* Within a group the top ``n`` by the ranking score are kept; exact ties are broken by a seeded
  random key (``numpy.random.default_rng([seed, query_index])``), so pools are deterministic and
  independent of batch order.
* A group with fewer eligible documents than asked is handled by ``fallback``: ``"relax"`` fills
  it with the best remaining eligible documents by the group's ranking score, thresholds dropped,
  and flags them ``relaxed``; ``"skip"`` skips the query with the reason. A corpus with fewer
  eligible documents than the pool size always skips. Nothing is silently short.

Released order: topic-only first, then summary-only, then both; each group in descending score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

GROUPS = ("topic", "summary", "both")


@dataclass(frozen=True)
class PoolConfig:
    """Pool sizes, thresholds and fallback; recorded verbatim in provenance."""

    n_topic_only: int = 50
    n_summary_only: int = 50
    n_both: int = 50
    threshold_mode: Literal["quantile", "absolute"] = "quantile"
    topic_high: float = 0.9
    topic_low: float = 0.5
    summary_high: float = 0.9
    summary_low: float = 0.5
    near_duplicate_cut: float = 0.8
    fallback: Literal["relax", "skip"] = "relax"

    def __post_init__(self) -> None:
        for name in ("n_topic_only", "n_summary_only", "n_both"):
            if getattr(self, name) < 0:
                raise ValueError(f"PoolConfig.{name} must be ≥ 0, got {getattr(self, name)}")
        if self.threshold_mode not in ("quantile", "absolute"):
            raise ValueError(f"PoolConfig.threshold_mode: unknown mode {self.threshold_mode!r}")
        if self.fallback not in ("relax", "skip"):
            raise ValueError(f"PoolConfig.fallback: unknown fallback {self.fallback!r}")
        if self.threshold_mode == "quantile":
            for name in ("topic_high", "topic_low", "summary_high", "summary_low"):
                if not 0.0 <= getattr(self, name) <= 1.0:
                    raise ValueError(f"PoolConfig.{name} must be a quantile in [0, 1]")

    @property
    def sizes(self) -> dict[str, int]:
        """Requested size of each group, in released order."""
        return {"topic": self.n_topic_only, "summary": self.n_summary_only, "both": self.n_both}

    @property
    def pool_size(self) -> int:
        """Total candidates per query."""
        return self.n_topic_only + self.n_summary_only + self.n_both

    def as_provenance(self) -> dict[str, object]:
        """The config as a flat dict for provenance columns/metadata."""
        return asdict(self)


@dataclass(frozen=True)
class Pool:
    """The pool of one query: documents in released order, or a skip with its reason."""

    query_index: int
    status: Literal["ok", "relaxed", "skipped"]
    reason: str
    doc_index: np.ndarray  # (pool_size,) int64; empty when skipped
    group: np.ndarray  # (pool_size,) str: topic | summary | both
    relaxed: np.ndarray  # (pool_size,) bool: filled by the fallback
    thresholds: dict[str, float]
    n_eligible: int
    n_near_duplicates: int


def select_pool(
    query_index: int,
    bma_scores: np.ndarray,
    summary_jaccard: np.ndarray,
    problem_jaccard: np.ndarray,
    config: PoolConfig,
    seed: int,
    query_doc_index: int | None = None,
) -> Pool:
    """Select one query's candidate pool from its score vectors against every document.

    ``query_doc_index`` is the query's own row in the document arrays (excluded), if it is one.
    """
    bma_scores = np.asarray(bma_scores, dtype=np.float64)
    summary_jaccard = np.asarray(summary_jaccard, dtype=np.float64)
    problem_jaccard = np.asarray(problem_jaccard, dtype=np.float64)
    n_docs = len(bma_scores)
    if not len(summary_jaccard) == len(problem_jaccard) == n_docs:
        raise ValueError(
            f"query {query_index}: score vectors differ in length "
            f"(bma {n_docs}, summary {len(summary_jaccard)}, problem {len(problem_jaccard)})"
        )
    near_duplicate = problem_jaccard >= config.near_duplicate_cut
    eligible = ~near_duplicate
    if query_doc_index is not None:
        eligible[query_doc_index] = False
        near_duplicate[query_doc_index] = False
    n_eligible = int(eligible.sum())
    tiebreak = np.random.default_rng([seed, query_index]).random(n_docs)

    def skip(reason: str, thresholds: dict[str, float]) -> Pool:
        empty = np.zeros(0, dtype=np.int64)
        return Pool(
            query_index,
            "skipped",
            reason,
            empty,
            empty.astype(str),
            empty.astype(bool),
            thresholds,
            n_eligible,
            int(near_duplicate.sum()),
        )

    if n_eligible < config.pool_size:
        return skip(f"only {n_eligible} eligible documents for a pool of {config.pool_size}", {})
    t_bma = _thresholds(bma_scores[eligible], config.topic_low, config.topic_high, config)
    t_jac = _thresholds(summary_jaccard[eligible], config.summary_low, config.summary_high, config)
    thresholds = {
        "topic_low": t_bma[0],
        "topic_high": t_bma[1],
        "summary_low": t_jac[0],
        "summary_high": t_jac[1],
    }
    bma_high = (bma_scores >= t_bma[1]) & (bma_scores > t_bma[0])
    bma_low = bma_scores <= t_bma[0]
    jac_high = (summary_jaccard >= t_jac[1]) & (summary_jaccard > t_jac[0])
    jac_low = summary_jaccard <= t_jac[0]
    strict = {
        "topic": eligible & bma_high & jac_low,
        "summary": eligible & jac_high & bma_low,
        "both": eligible & bma_high & jac_high,
    }
    ranking = {
        "topic": bma_scores,
        "summary": summary_jaccard,
        "both": bma_scores + summary_jaccard,
    }

    short = {g: n for g, n in config.sizes.items() if strict[g].sum() < n}
    if short and config.fallback == "skip":
        detail = ", ".join(f"{g}-group {int(strict[g].sum())} of {n}" for g, n in short.items())
        return skip(f"groups too small: {detail}", thresholds)

    taken = np.zeros(n_docs, dtype=bool)
    chosen: dict[str, np.ndarray] = {}
    for g, n in config.sizes.items():
        chosen[g] = top_k(ranking[g], strict[g], min(n, int(strict[g].sum())), tiebreak)
        taken[chosen[g]] = True
    n_relaxed: dict[str, int] = {}
    for g, n in config.sizes.items():
        missing = n - len(chosen[g])
        if missing:
            fill = top_k(ranking[g], eligible & ~taken, missing, tiebreak)
            taken[fill] = True
            n_relaxed[g] = missing
            chosen[g] = np.concatenate([chosen[g], fill])

    doc_index = np.concatenate([chosen[g] for g in GROUPS])
    group = np.concatenate([np.full(len(chosen[g]), g) for g in GROUPS])
    relaxed = np.concatenate(
        [np.arange(len(chosen[g])) >= len(chosen[g]) - n_relaxed.get(g, 0) for g in GROUPS]
    )
    status = "relaxed" if n_relaxed else "ok"
    reason = ", ".join(f"{g}-group relaxed by {k}" for g, k in n_relaxed.items())
    return Pool(
        query_index,
        status,
        reason,
        doc_index.astype(np.int64),
        group,
        relaxed,
        thresholds,
        n_eligible,
        int(near_duplicate.sum()),
    )


def _thresholds(
    scores: np.ndarray, low: float, high: float, config: PoolConfig
) -> tuple[float, float]:
    if config.threshold_mode == "absolute":
        return float(low), float(high)
    t_low, t_high = np.quantile(scores, [low, high])
    return float(t_low), float(t_high)


def top_k(scores: np.ndarray, mask: np.ndarray, k: int, tiebreak: np.ndarray) -> np.ndarray:
    """Indices of the ``k`` highest ``scores`` where ``mask``, in descending score order.

    Exact ties are ordered by ascending ``tiebreak`` key. O(n) selection plus O(k log k) sorting.
    """
    candidates = np.flatnonzero(mask)
    if k <= 0 or len(candidates) == 0:
        return np.zeros(0, dtype=np.int64)
    values = scores[candidates]
    if len(candidates) > k:
        kth = np.partition(values, len(values) - k)[len(values) - k]
        above = candidates[values > kth]
        tied = candidates[values == kth]
        need = k - len(above)
        tied = tied[np.argpartition(tiebreak[tied], need - 1)[:need]] if need < len(tied) else tied
        candidates = np.concatenate([above, tied])
    order = np.lexsort((tiebreak[candidates], -scores[candidates]))
    return candidates[order].astype(np.int64)


def sample_queries(domains: Sequence[str], n_queries: int, seed: int) -> np.ndarray:
    """Draw ``n_queries`` row indices balanced across domains (seeded, without replacement).

    Water-filling: a domain with too few rows gives all it has and the shortfall is spread over the
    other domains, whose quotas differ by at most one. Raises ValueError if fewer rows exist than
    queries asked.
    """
    domains = np.asarray(domains, dtype=object)
    if n_queries > len(domains):
        raise ValueError(f"asked for {n_queries} queries but only {len(domains)} rows exist")
    rng = np.random.default_rng(seed)
    names = sorted(set(domains.tolist()))
    shuffled = {d: rng.permutation(np.flatnonzero(domains == d)) for d in names}
    quota: dict[str, int] = {}
    remaining = n_queries
    by_size = sorted(names, key=lambda d: (len(shuffled[d]), d))
    for k, d in enumerate(by_size):
        quota[d] = min(len(shuffled[d]), remaining // (len(by_size) - k))
        remaining -= quota[d]
    picked = np.concatenate([shuffled[d][: quota[d]] for d in names])
    return np.sort(picked).astype(np.int64)
