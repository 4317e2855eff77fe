"""Validity of Bradley–Terry ratings: agreement, split-half reliability, bootstrap intervals,
recipe sensitivity (issue 8). Pure numpy/scipy, batched over queries.

Shapes follow :mod:`saber_core.tournament.swiss` and :mod:`saber_core.rating.bradley_terry`:
ratings are
``(Q, n)`` arrays (``Q`` queries, ``n`` candidates); judgments are
:class:`saber_core.rating.comparisons.Comparisons` (flat rows, ``y`` = P(``a`` beats ``b``) in
[0, 1],
hard 0/1 or soft, NaN = dropped).

Agreement between two rating vectors ``x, y`` of one query, over the pairs ``i < j`` of
candidates (a candidate with a NaN in either vector is left out), with ``sx = sign(x_i − x_j)``
and ``sy = sign(y_i − y_j)``:

* Kendall τ-b = Σ sx·sy / sqrt(Σ sx² · Σ sy²) (ties in either vector count neither as
  concordant nor discordant, and leave the denominator; equals ``scipy.stats.kendalltau``).
  NaN when one vector is constant.
* pairwise agreement = mean over pairs of ``1 − |sx − sy| / 2``: a pair ordered the same way in
  both (or tied in both) scores 1, ordered oppositely 0, tied in exactly one of them ½. Without
  ties it equals ``(1 + τ) / 2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.stats import rankdata

from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import Comparisons

_PAIR_ELEMENTS = 2_000_000  # (Q_chunk · n · n) sign entries held at once


# ----------------------------------------------------------------------------- agreement
def _as_rows(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim not in (1, 2):
        raise ValueError(f"x {x.shape} and y {y.shape} must be equal 1-D (n,) or 2-D (Q, n)")
    single = x.ndim == 1
    return np.atleast_2d(x), np.atleast_2d(y), single


def _pair_sums(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row: Σ sx·sy, Σ sx², Σ sy², Σ |sx − sy|, number of valid pairs (all over i < j)."""
    nq, n = x.shape
    out = np.zeros((5, nq))
    chunk = max(1, _PAIR_ELEMENTS // max(1, n * n))
    for start in range(0, nq, chunk):
        xs, ys = x[start : start + chunk], y[start : start + chunk]
        valid = np.isfinite(xs) & np.isfinite(ys)
        xs, ys = np.where(valid, xs, 0.0), np.where(valid, ys, 0.0)
        pair_ok = valid[:, :, None] & valid[:, None, :]
        sx = np.sign(xs[:, :, None] - xs[:, None, :]) * pair_ok
        sy = np.sign(ys[:, :, None] - ys[:, None, :]) * pair_ok
        # Full (i, j) sums count every unordered pair twice (and the diagonal is 0): halve.
        sl = slice(start, start + len(xs))
        out[0, sl] = np.einsum("qij,qij->q", sx, sy) / 2
        out[1, sl] = np.einsum("qij,qij->q", sx, sx) / 2
        out[2, sl] = np.einsum("qij,qij->q", sy, sy) / 2
        out[3, sl] = np.abs(sx - sy).sum(axis=(1, 2)) / 2
        k = valid.sum(axis=1)
        out[4, sl] = k * (k - 1) / 2
    return tuple(out)


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall τ-b per query (module docstring); (Q,) for (Q, n) inputs, a 0-d array for (n,).

    τ_b = (C − D) / sqrt((P − T_x)(P − T_y)) with C/D concordant/discordant pairs, P all pairs,
    T_x / T_y pairs tied in x / y. NaN where a vector is constant (or < 2 valid candidates).
    """
    x, y, single = _as_rows(x, y)
    s, sxx, syy, _, _ = _pair_sums(x, y)
    den = np.sqrt(sxx * syy)
    tau = np.full(len(s), np.nan)
    np.divide(s, den, out=tau, where=den > 0)
    return tau[0] if single else tau


def pairwise_agreement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fraction of candidate pairs ordered the same way, per query (module docstring).

    ``1 − Σ_{i<j} |sign(x_i − x_j) − sign(y_i − y_j)| / (2 P)``: concordant or both-tied = 1,
    discordant = 0, tied in one vector only = ½. NaN when fewer than 2 valid candidates.
    """
    x, y, single = _as_rows(x, y)
    _, _, _, dist, pairs = _pair_sums(x, y)  # dist = Σ_{i<j} |sx − sy|
    agree = np.full(len(pairs), np.nan)
    np.divide(pairs - dist / 2, pairs, out=agree, where=pairs > 0)
    return agree[0] if single else agree


def spearman_rho(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ per query: Pearson correlation of average ranks (ties get their mean rank).

    Inputs must be finite. NaN where a vector is constant.
    """
    x, y, single = _as_rows(x, y)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("spearman_rho needs finite inputs")
    rx = rankdata(x, axis=1)
    ry = rankdata(y, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    rho = np.full(len(x), np.nan)
    np.divide((rx * ry).sum(axis=1), den, out=rho, where=den > 0)
    return rho[0] if single else rho


def judgment_agreement(ratings: np.ndarray, judgments: Comparisons) -> np.ndarray:
    """Per query, the fraction of judgments whose winner has the higher rating; (Q,).

    A judgment counts when its outcome is decided (``y`` ≠ ½ and not NaN; ``a`` wins when
    y > ½): 1 if the ratings order ``a, b`` the same way, 0 if the opposite, ½ if the two
    ratings are equal. This is the "agreement with human preferences" of the SABER-Math paper
    when the judgments are human labels. NaN for a query without decided judgments.
    """
    ratings = np.asarray(ratings, dtype=float)
    keep = judgments.decided & (judgments.y != 0.5)
    q, a, b, o = judgments.q[keep], judgments.a[keep], judgments.b[keep], judgments.y[keep]
    score = 0.5 + 0.5 * np.sign(ratings[q, a] - ratings[q, b]) * np.sign(o - 0.5)
    nq = ratings.shape[0]
    count = np.bincount(q, minlength=nq).astype(float)
    total = np.bincount(q, score, minlength=nq)
    out = np.full(nq, np.nan)
    np.divide(total, count, out=out, where=count > 0)
    return out


def mean_and_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and standard error ``sd / sqrt(k)`` (ddof = 1) of the finite values; NaN if none."""
    v = np.asarray(values, dtype=float).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(v.mean()), se


# ----------------------------------------------------------------------------- helpers
def _clean_rows(comparisons: Comparisons) -> Comparisons:
    """The decided rows, sorted by query (stable)."""
    kept = comparisons.select(comparisons.decided)
    return kept.select(np.argsort(kept.q, kind="stable"))


def _position_in_query(query_idx: np.ndarray, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by query: (count per query (Q,), position of each row within its query)."""
    counts = np.bincount(query_idx, minlength=n_queries)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return counts, np.arange(len(query_idx)) - starts[query_idx]


def _query_keys(query_keys: np.ndarray | None, n_queries: int) -> np.ndarray:
    """The per-query stream keys: ``query_keys`` (Q,) non-negative ints, default 0 .. Q − 1."""
    if query_keys is None:
        return np.arange(n_queries)
    keys = np.asarray(query_keys, dtype=np.int64).reshape(-1)
    if len(keys) != n_queries or (keys < 0).any():
        raise ValueError(f"query_keys must be {n_queries} non-negative integers")
    return keys


def _query_uniforms(seed: int, keys: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """Uniforms (k, Σ counts) for q-sorted rows; query ``g`` uses
    ``default_rng([seed, keys[g]])``.

    One stream per query makes a query's draws independent of the other queries in the call:
    with a stable key per query (e.g. its position in the full query list) its results do not
    change when the sample of queries or the block size changes.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    parts = [
        np.random.default_rng([seed, int(key)]).random((k, int(c)))
        for key, c in zip(keys, counts, strict=True)
    ]
    return np.concatenate(parts, axis=1) if parts else np.zeros((k, 0))


# ----------------------------------------------------------------------------- split-half
@dataclass(frozen=True)
class SplitHalf:
    """Split-half reliability of BT ratings.

    ``half_r`` (Q, repeats): Spearman ρ between the BT strengths fitted on the two halves;
    ``per_query`` (Q,): Spearman–Brown ``2 r̄ / (1 + r̄)`` of the query's repeat-mean ``r̄``
    (0 when ``r̄ ≤ 0``; NaN when no repeat gave a correlation);
    ``mean_r``: mean of all finite ``half_r``; ``mean``: Spearman–Brown of ``mean_r`` (0 when
    ``mean_r ≤ 0``), the pooled reliability of the full set of judgments.
    """

    half_r: np.ndarray
    per_query: np.ndarray
    mean_r: float
    mean: float


def spearman_brown(r: np.ndarray | float) -> np.ndarray:
    """Reliability of a test twice as long from the half-test correlation: ``2r / (1 + r)``.

    A correlation ``r ≤ 0`` means no measurable reliability and gives 0 (the formula would
    amplify a negative sampling fluctuation toward −∞ as r → −1); NaN stays NaN.
    """
    r = np.asarray(r, dtype=float)
    rc = np.where(np.isnan(r), np.nan, np.maximum(r, 0.0))
    return 2.0 * rc / (1.0 + rc)


def split_half_reliability(
    comparisons: Comparisons,
    n_repeats: int = 10,
    seed: int = 0,
    C: float = 1.0,
    query_keys: np.ndarray | None = None,
) -> SplitHalf:
    """Split each query's judgments into two random halves, fit BT on each, correlate.

    Per repeat and query the (non-NaN) judgments are put in a uniformly random order (query
    ``q`` draws from ``np.random.default_rng([seed, query_keys[q]])``, keys default to ``q``)
    and alternately assigned to half A and half B (sizes differ by at most one). Both halves
    of all queries and repeats are fitted in one batched :func:`fit_bradley_terry` call
    (``2 · repeats · Q`` problems). ``r`` = Spearman ρ of the two strength vectors (NaN when
    one is constant). Each half has half the judgments, so ``r`` understates the reliability
    of the full set, estimated by Spearman–Brown ``ρ_SB = 2 r̄ / (1 + r̄)``
    (:func:`spearman_brown`): per query with ``r̄`` = the mean of ``r`` over repeats, pooled
    with ``r̄`` = the mean over queries and repeats.
    """
    n_queries, n_players = comparisons.n_queries, comparisons.n_players
    clean = _clean_rows(comparisons)
    q, a, b, y = clean.q, clean.a, clean.b, clean.y
    counts, pos = _position_in_query(q, n_queries)
    keys = _query_uniforms(seed, _query_keys(query_keys, n_queries), counts, n_repeats)
    blocks = []
    for rep in range(n_repeats):
        order = np.lexsort((keys[rep], q))  # random order inside each query
        half = np.empty(len(q), dtype=np.int64)
        half[order] = pos % 2  # ``pos`` is the rank inside the query for the q-sorted rows
        blocks.append(((rep * n_queries + q) * 2 + half, a, b, y))
    qq, aa, bb, yy = (np.concatenate(v) for v in zip(*blocks, strict=True))
    n_fits = 2 * n_repeats * n_queries
    beta = fit_bradley_terry(Comparisons(qq, aa, bb, yy, n_fits, n_players), C=C)
    beta = beta.reshape(n_repeats, n_queries, 2, n_players)
    first = beta[:, :, 0].reshape(-1, n_players)
    second = beta[:, :, 1].reshape(-1, n_players)
    r = spearman_rho(first, second).reshape(n_repeats, n_queries).T
    finite = np.isfinite(r)
    k = finite.sum(axis=1)
    r_mean = np.full(n_queries, np.nan)
    np.divide(np.where(finite, r, 0.0).sum(axis=1), k, out=r_mean, where=k > 0)
    pooled, _ = mean_and_se(r)
    return SplitHalf(
        half_r=r,
        per_query=spearman_brown(r_mean),
        mean_r=pooled,
        mean=float(spearman_brown(pooled)),
    )


# ----------------------------------------------------------------------------- bootstrap
@dataclass(frozen=True)
class BootstrapIntervals:
    """Percentile bootstrap intervals of BT ratings (see :func:`bootstrap_intervals`).

    ``strength`` (Q, n): the point estimate β̂ (Σ_i β̂_i = 0 at the L2 optimum);
    ``strength_lower/upper`` (Q, n): percentile interval of β over the replicates;
    ``rating`` (Q, n): β̂ min–max rescaled to [0, 5] (= ``rescale_ratings(strength)``);
    ``rating_lower/upper``: the strength interval mapped by the SAME affine map as ``rating``
    (``5 (β − min β̂) / (max β̂ − min β̂)``), so it may extend slightly outside [0, 5];
    ``replicates`` (B, Q, n): bootstrap strengths (empty (0, Q, n) unless kept);
    ``level``: nominal coverage.
    """

    strength: np.ndarray
    strength_lower: np.ndarray
    strength_upper: np.ndarray
    rating: np.ndarray
    rating_lower: np.ndarray
    rating_upper: np.ndarray
    replicates: np.ndarray
    level: float


def _resample_sorted(clean: Comparisons, n_boot: int, seed: int, keys: np.ndarray) -> Comparisons:
    """:func:`resample_comparisons` on clean q-sorted rows, query ``q`` keyed ``keys[q]``."""
    q, n_queries = clean.q, clean.n_queries
    counts, _ = _position_in_query(q, n_queries)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    u = _query_uniforms(seed, keys, counts, n_boot)
    # Row slot j (in query q's block) of replicate k takes row starts[q] + floor(u · m_q).
    pick = starts[q] + np.minimum((u * counts[q]).astype(np.int64), counts[q] - 1)
    rep_q = (np.arange(n_boot)[:, None] * n_queries + q[None, :]).reshape(-1)
    pick = pick.reshape(-1)
    return Comparisons(
        rep_q, clean.a[pick], clean.b[pick], clean.y[pick], n_boot * n_queries, clean.n_players
    )


def resample_comparisons(
    comparisons: Comparisons,
    n_boot: int,
    seed: int = 0,
    query_keys: np.ndarray | None = None,
) -> Comparisons:
    """``n_boot`` nonparametric bootstrap resamples of every query's judgments.

    Replicate ``k`` of query ``q`` draws ``m_q`` rows with replacement from that query's ``m_q``
    non-NaN rows (uniforms from ``np.random.default_rng([seed, query_keys[q]])``, keys default
    to ``q``); its rows get the batched query index ``k · Q + q``. Returns the
    ``n_boot · Σ m_q`` rows as comparisons of ``n_boot · Q`` queries.
    """
    keys = _query_keys(query_keys, comparisons.n_queries)
    return _resample_sorted(_clean_rows(comparisons), n_boot, seed, keys)


def bootstrap_intervals(
    comparisons: Comparisons,
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
    C: float = 1.0,
    block_queries: int = 32,
    keep_replicates: bool = True,
    query_keys: np.ndarray | None = None,
) -> BootstrapIntervals:
    """Percentile bootstrap ``level`` intervals of every candidate's BT strength and rating.

    Resampling unit: a judgment (row), with replacement within its query
    (:func:`resample_comparisons`: query ``q`` draws from ``default_rng([seed,
    query_keys[q]])``, so with stable keys its intervals do not depend on the other queries),
    i.e. conditional on the set of pairs that were played (an adaptive Swiss design is treated
    as fixed). Each replicate is refitted with the same ``C``, ``block_queries`` queries at a
    time (``B · block_queries`` problems per batched :func:`fit_bradley_terry` call, bounding
    memory). Interval = the ``(1 − level)/2`` and ``(1 + level)/2`` quantiles (linear
    interpolation) of the replicate strengths. With ``keep_replicates=False`` the (B, Q, n)
    replicates are not kept (``replicates`` is then empty).

    Measured coverage (95% level, see tests and ``saber study tournament``): 0.92–0.94 of the
    estimand on fixed random designs; about 0.88–0.90 on Swiss-20 designs, whose adaptive
    pairing the row bootstrap does not reproduce (intervals there are somewhat too narrow).

    Scale: intervals are taken on the strength β, which is identified (the L2 penalty puts
    Σ β = 0 in every fit), NOT on per-replicate [0, 5] ratings: min–max rescaling each replicate
    would pin the extreme candidates at 0 and 5 in every replicate and spread the noise of the
    min and max over all candidates. The rating interval is the strength interval under the
    point estimate's own affine map. With L2 (C = 1) the strengths are shrunk toward 0; the
    interval targets the penalized estimand (the fit one would get from the expected outcomes
    on the same pairs), not the unpenalized true strengths.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 2:
        raise ValueError(f"n_boot must be >= 2, got {n_boot}")
    if block_queries < 1:
        raise ValueError(f"block_queries must be >= 1, got {block_queries}")
    n_queries, n_players = comparisons.n_queries, comparisons.n_players
    keys = _query_keys(query_keys, n_queries)
    beta = fit_bradley_terry(comparisons, C=C)
    clean = _clean_rows(comparisons)
    starts = np.searchsorted(clean.q, np.arange(n_queries + 1))
    alpha = (1.0 - level) / 2.0
    lower = np.empty((n_queries, n_players))
    upper = np.empty((n_queries, n_players))
    kept = np.empty((n_boot if keep_replicates else 0, n_queries, n_players))
    for first in range(0, n_queries, block_queries):
        last = min(first + block_queries, n_queries)
        part = clean.select(slice(starts[first], starts[last]))
        nb = last - first
        block = Comparisons(part.q - first, part.a, part.b, part.y, nb, n_players)
        reps = fit_bradley_terry(_resample_sorted(block, n_boot, seed, keys[first:last]), C=C)
        reps = reps.reshape(n_boot, nb, n_players)
        lower[first:last], upper[first:last] = np.quantile(reps, [alpha, 1.0 - alpha], axis=0)
        if keep_replicates:
            kept[:, first:last] = reps
    lo = beta.min(axis=1, keepdims=True)
    span = beta.max(axis=1, keepdims=True) - lo
    flat = span == 0.0
    scale = np.where(flat, 0.0, 5.0 / np.where(flat, 1.0, span))
    return BootstrapIntervals(
        strength=beta,
        strength_lower=lower,
        strength_upper=upper,
        rating=(beta - lo) * scale,
        rating_lower=(lower - lo) * scale,
        rating_upper=(upper - lo) * scale,
        replicates=kept,
        level=level,
    )


# ----------------------------------------------------------------------------- recipe audit
def pool_overlap(pools_a: Sequence[Sequence], pools_b: Sequence[Sequence]) -> np.ndarray:
    """Per query, Jaccard |A ∩ B| / |A ∪ B| of the two candidate sets; (Q,), 1.0 if both empty.

    ``pools_a[q]`` and ``pools_b[q]`` are the candidate doc ids of query ``q`` under two recipes
    (e.g. pools built from LLM-written vs human-written summaries); duplicates count once.
    """
    if len(pools_a) != len(pools_b):
        raise ValueError(f"{len(pools_a)} pools vs {len(pools_b)} pools")
    out = np.empty(len(pools_a))
    for k, (pa, pb) in enumerate(zip(pools_a, pools_b, strict=True)):
        sa, sb = np.unique(np.asarray(pa)), np.unique(np.asarray(pb))
        union = len(np.union1d(sa, sb))
        out[k] = len(np.intersect1d(sa, sb, assume_unique=True)) / union if union else 1.0
    return out


@dataclass(frozen=True)
class SharedRankCorrelation:
    """Per query: ``n_shared`` candidates in both pools, Spearman ρ and Kendall τ-b of their
    two ratings (NaN when fewer than 2 shared candidates or one side is constant)."""

    n_shared: np.ndarray
    spearman: np.ndarray
    kendall: np.ndarray


def shared_rank_correlation(
    ids_a: Sequence[Sequence],
    ratings_a: Sequence[Sequence[float]],
    ids_b: Sequence[Sequence],
    ratings_b: Sequence[Sequence[float]],
) -> SharedRankCorrelation:
    """Rank agreement of the ratings of candidates present in both pools of each query.

    For query ``q``, the shared ids ``S = ids_a[q] ∩ ids_b[q]`` (ids must be unique within a
    pool) are aligned, then ρ = Spearman and τ = Kendall τ-b of ``ratings_a`` vs ``ratings_b``
    on ``S`` (ratings are rated within their own pool, so only the order is compared).
    """
    nq = len(ids_a)
    if not nq == len(ratings_a) == len(ids_b) == len(ratings_b):
        raise ValueError("ids_a, ratings_a, ids_b and ratings_b must have one entry per query")
    n_shared = np.zeros(nq, dtype=np.int64)
    rho = np.full(nq, np.nan)
    tau = np.full(nq, np.nan)
    for k in range(nq):
        ia, ib = np.asarray(ids_a[k]), np.asarray(ids_b[k])
        ra = np.asarray(ratings_a[k], dtype=float)
        rb = np.asarray(ratings_b[k], dtype=float)
        if len(np.unique(ia)) != len(ia) or len(np.unique(ib)) != len(ib):
            raise ValueError(f"query {k}: candidate ids must be unique within a pool")
        _, pa, pb = np.intersect1d(ia, ib, assume_unique=True, return_indices=True)
        n_shared[k] = len(pa)
        if len(pa) >= 2:
            x, y = ra[pa], rb[pb]
            rho[k] = spearman_rho(x, y)
            tau[k] = kendall_tau_b(x, y)
    return SharedRankCorrelation(n_shared=n_shared, spearman=rho, kendall=tau)


def recipe_agreement(
    query_ids: Sequence[str],
    own_ids: Sequence[Sequence],
    own_ratings: Sequence[Sequence[float]],
    other_ids: Sequence[Sequence],
    other_ratings: Sequence[Sequence[float]],
) -> pl.DataFrame:
    """Per query, how two summary recipes' benchmarks agree: ``query_id, pool_overlap``
    (:func:`pool_overlap`), ``n_shared, spearman, kendall_tau`` (:func:`shared_rank_correlation`;
    null where undefined)."""
    overlap = pool_overlap(own_ids, other_ids)
    corr = shared_rank_correlation(own_ids, own_ratings, other_ids, other_ratings)
    return pl.DataFrame(
        {
            "query_id": list(query_ids),
            "pool_overlap": overlap,
            "n_shared": corr.n_shared,
            "spearman": corr.spearman,
            "kendall_tau": corr.kendall,
        },
        schema_overrides={"query_id": pl.String},
    ).with_columns(pl.col("spearman", "kendall_tau").fill_nan(None))


def sample_subset(items: Sequence, k: int, seed: int, stream: int) -> list:
    """A seeded sample of ``k`` items in their original order (``default_rng([seed, stream])``);
    all items when ``k`` ≤ 0 or ``k`` ≥ their number."""
    items = list(items)
    if not 0 < k < len(items):
        return items
    pick = np.random.default_rng([seed, stream]).choice(len(items), size=k, replace=False)
    return [items[i] for i in np.sort(pick)]
