"""Agreement of two label sources on the (query, candidate) pairs both label (``saber judge
agree``), and of the leaderboards they induce.

**Pair level.** Inputs: label vectors ``a`` and ``b`` over the N common pairs and each pair's
query. Figures (``a`` is source A, ``b`` source B; sums run over queries q and their pairs i):

* ``r2_within`` — pooled within-query R² of the OLS fit of B on A inside every query::

      R² = 1 − Σ_q Σ_i (b_qi − b̂_qi)² / Σ_q Σ_i (b_qi − b̄_q)²,
      b̂_qi = b̄_q + β_q (a_qi − ā_q),  β_q = S_ab,q / S_aa,q

  (S_ab,q = Σ_i (a_qi − ā_q)(b_qi − b̄_q); b̂ = b̄_q when A is constant in q). Equivalently
  ``Σ_q S_ab,q² / S_aa,q / Σ_q S_bb,q``: the share of B's within-query spread that A explains
  with one slope per query (the query offsets are free, so it measures ranking inside a pool);
* ``spearman_median`` — median over queries of Spearman's ρ (average ranks for ties) between A
  and B within the query; queries with fewer than 3 pairs or constant labels in A or B are
  skipped and counted (``spearman_skipped``);
* ``exact_agreement`` — share of pairs with equal levels after cutting both onto a discrete
  scale: level = number of cuts ≤ label (default cuts 0.5, 1.5 → levels 0/1/2, as the
  MathPinpoint-Judge-8B card; e.g. 0.5, 1.5, 2.5, 3.5, 4.5 for 0–5 ratings; two sources on
  different scales get their own cuts, as many for each); ``confusion`` is the L × L count
  table (rows A's level, columns B's);
* ``extreme_flips`` — share of pairs at the lowest level of one source and the highest of the
  other;
* ``auc`` — pooled Mann–Whitney AUC of A's raw label separating pairs at B's top level from
  pairs at B's bottom level: P(a_pos > a_neg) + ½ P(a_pos = a_neg) over all (pos, neg) pairs;
* ``kappa_linear`` / ``kappa_quadratic`` — weighted Cohen's κ on the levels::

      κ = 1 − Σ_ij w_ij O_ij / Σ_ij w_ij E_ij,  E_ij = O_i· O_·j / N,
      w_ij = |i − j| / (L − 1)  (linear)  or  ((i − j) / (L − 1))²  (quadratic).

**Intervals.** Every figure gets a percentile bootstrap 95% interval from ``n_boot`` resamples of
the queries with replacement (``numpy.random.default_rng(seed)``; the seed is recorded). A
resample is a vector of query multiplicities, and every figure is a function of per-query sums
(the AUC of a Q × Q table of cross-query comparison counts), so all resamples are evaluated as
matrix products without re-pairing.

**System level.** Kendall's τ-b of two score vectors over the same systems and τ_AP (Yilmaz,
Aslam and Robertson 2008) of A's ordering against B's::

    τ_AP = 2 / (n − 1) · Σ_{i=2..n} C(i) / (i − 1) − 1

where systems are ranked by B (descending; ties by the given order) and C(i) is the number of
systems above rank i in B that A also scores above the system at rank i (a tie in A counts ½).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
from scipy.stats import kendalltau

DEFAULT_CUTS = (0.5, 1.5)
MIN_SPEARMAN_PAIRS = 3
FIGURES = (
    "r2_within",
    "spearman_median",
    "exact_agreement",
    "extreme_flips",
    "auc",
    "kappa_linear",
    "kappa_quadratic",
)


@dataclass(frozen=True)
class Figure:
    """A point estimate with its bootstrap 95% interval (NaN when undefined)."""

    value: float
    lo: float
    hi: float

    def as_dict(self) -> dict[str, float | None]:
        """JSON form: NaN becomes ``None``."""
        return {k: (None if np.isnan(v) else float(v)) for k, v in vars(self).items()}


@dataclass(frozen=True)
class PairAgreement:
    """The pair-level figures of two label sources (module docstring)."""

    figures: dict[str, Figure]
    confusion: np.ndarray  # (L, L) counts, rows = A's level, columns = B's level
    cuts: tuple[float, ...]
    cuts_b: tuple[float, ...]
    n_pairs: int
    n_queries: int
    spearman_queries: int
    spearman_skipped: int
    n_boot: int
    seed: int
    auc_pairs: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON form."""
        return {
            "figures": {k: f.as_dict() for k, f in self.figures.items()},
            "confusion": self.confusion.tolist(),
            "cuts_a": list(self.cuts),
            "cuts_b": list(self.cuts_b),
            "n_pairs": self.n_pairs,
            "n_queries": self.n_queries,
            "spearman_queries": self.spearman_queries,
            "spearman_skipped": self.spearman_skipped,
            "auc_pairs": self.auc_pairs,
            "bootstrap": {
                "n_boot": self.n_boot,
                "seed": self.seed,
                "method": "percentile 2.5/97.5, queries resampled with replacement",
            },
        }


def cut_levels(labels: np.ndarray, cuts: Sequence[float] = DEFAULT_CUTS) -> np.ndarray:
    """Discrete levels 0..len(cuts): the number of cuts ≤ each label (cuts ascending)."""
    edges = np.asarray(cuts, dtype=np.float64)
    if edges.size == 0 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"cuts must be strictly increasing and non-empty, got {list(cuts)}")
    return np.searchsorted(edges, np.asarray(labels, dtype=np.float64), side="right")


def group_ranks(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank) of ``values`` within each code."""
    values = np.asarray(values, dtype=np.float64)
    order = np.lexsort((values, codes))
    v, c = values[order], codes[order]
    n = len(v)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (v[1:] != v[:-1]) | (c[1:] != c[:-1])
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = c[1:] != c[:-1]
    run_id = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    run_end = np.append(run_start[1:], n)  # exclusive
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    mean_pos = (run_start + run_end - 1) / 2.0
    ranks = np.empty(n)
    ranks[order] = mean_pos[run_id] - group_start + 1.0
    return ranks


def _centred_sums(x: np.ndarray, y: np.ndarray, codes: np.ndarray, q: int) -> tuple:
    """Per-query counts, S_xx, S_yy and S_xy (sums of centred products)."""
    n = np.bincount(codes, minlength=q).astype(np.float64)
    safe = np.maximum(n, 1.0)
    dx = x - (np.bincount(codes, x, q) / safe)[codes]
    dy = y - (np.bincount(codes, y, q) / safe)[codes]
    return (
        n,
        np.bincount(codes, dx * dx, q),
        np.bincount(codes, dy * dy, q),
        np.bincount(codes, dx * dy, q),
    )


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Median of ``values`` repeated by each row of integer ``weights`` (B, k); NaN if empty."""
    order = np.argsort(values)
    v, w = values[order], weights[:, order]
    cum = np.cumsum(w, axis=1)
    total = cum[:, -1] if cum.shape[1] else np.zeros(len(w))
    out = np.full(len(w), np.nan)
    ok = total > 0
    if not np.any(ok):
        return out
    lo = ((total - 1) // 2)[:, None]
    hi = (total // 2)[:, None]
    first = v[(cum > lo).argmax(axis=1)]
    second = v[(cum > hi).argmax(axis=1)]
    out[ok] = ((first + second) / 2.0)[ok]
    return out


def _kappa(confusion: np.ndarray, power: int) -> np.ndarray:
    """Weighted κ of a stack of (B, L, L) confusion tables (module docstring)."""
    levels = confusion.shape[-1]
    idx = np.arange(levels)
    weights = (np.abs(idx[:, None] - idx[None, :]) / max(levels - 1, 1)) ** power
    total = confusion.sum(axis=(1, 2))
    expected = confusion.sum(axis=2)[:, :, None] * confusion.sum(axis=1)[:, None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = expected / total[:, None, None]
        return 1.0 - (confusion * weights).sum(axis=(1, 2)) / (expected * weights).sum(axis=(1, 2))


def _auc_table(a: np.ndarray, pos: np.ndarray, neg: np.ndarray, codes: np.ndarray, q: int):
    """M[q, r] = Σ_{i ∈ q pos, j ∈ r neg} (1[a_i > a_j] + ½ 1[a_i = a_j])."""
    table = np.zeros((q, q))
    a_pos, c_pos = a[pos], codes[pos]
    for r in np.unique(codes[neg]):
        negs = np.sort(a[neg & (codes == r)])
        below = np.searchsorted(negs, a_pos, side="left")
        tied = np.searchsorted(negs, a_pos, side="right") - below
        table[:, r] = np.bincount(c_pos, below + 0.5 * tied, q)
    return table


def _figures(
    weights: np.ndarray, sums: dict[str, np.ndarray], levels: int
) -> dict[str, np.ndarray]:
    """Every figure for each row of query multiplicities ``weights`` (B, Q)."""
    w = weights.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = 1.0 - (w @ sums["rss"]) / (w @ sums["ss_b"])
        confusion = (w @ sums["confusion"]).reshape(-1, levels, levels)
        n = confusion.sum(axis=(1, 2))
        agree = np.trace(confusion, axis1=1, axis2=2) / n
        flips = (confusion[:, 0, -1] + confusion[:, -1, 0]) / n
        auc_num = np.einsum("bq,qr,br->b", w, sums["auc"], w)
        auc = auc_num / ((w @ sums["n_pos"]) * (w @ sums["n_neg"]))
    return {
        "r2_within": r2,
        "spearman_median": _weighted_median(sums["rho"], weights[:, sums["rho_valid"]]),
        "exact_agreement": agree,
        "extreme_flips": flips,
        "auc": auc,
        "kappa_linear": _kappa(confusion, 1),
        "kappa_quadratic": _kappa(confusion, 2),
    }


def pair_agreement(
    a: np.ndarray,
    b: np.ndarray,
    query_ids: Sequence[str] | np.ndarray,
    cuts: Sequence[float] = DEFAULT_CUTS,
    n_boot: int = 1000,
    seed: int = 0,
    cuts_b: Sequence[float] | None = None,
) -> PairAgreement:
    """The pair-level figures of labels ``a`` (source A) and ``b`` (source B) over the same
    pairs, ``query_ids[i]`` the query of pair i, with bootstrap intervals (module docstring).
    ``cuts`` cut both sources unless ``cuts_b`` (as many cuts) is given for B's scale."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(query_ids) != len(a):
        raise ValueError("a, b and query_ids must be 1-D of one length")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("labels must be finite")
    if len(a) == 0:
        raise ValueError("no pair is labelled by both sources")
    _, codes = np.unique(np.asarray(query_ids, dtype=str), return_inverse=True)
    q = int(codes.max()) + 1
    n, s_aa, s_bb, s_ab = _centred_sums(a, b, codes, q)
    explained = np.divide(s_ab * s_ab, s_aa, out=np.zeros(q), where=s_aa > 0)
    _, r_aa, r_bb, r_ab = _centred_sums(group_ranks(a, codes), group_ranks(b, codes), codes, q)
    rho_valid = (n >= MIN_SPEARMAN_PAIRS) & (r_aa > 0) & (r_bb > 0)
    rho = r_ab[rho_valid] / np.sqrt(r_aa[rho_valid] * r_bb[rho_valid])
    cuts_b = cuts if cuts_b is None else cuts_b
    if len(cuts_b) != len(cuts):
        raise ValueError(f"A's cuts {list(cuts)} and B's {list(cuts_b)} differ in number")
    levels = len(cuts) + 1
    la, lb = cut_levels(a, cuts), cut_levels(b, cuts_b)
    cells = codes * levels * levels + la * levels + lb
    confusion = np.bincount(cells, minlength=q * levels * levels).reshape(q, levels * levels)
    pos, neg = lb == levels - 1, lb == 0
    sums = {
        "rss": s_bb - explained,
        "ss_b": s_bb,
        "rho": rho,
        "rho_valid": rho_valid,
        "confusion": confusion.astype(np.float64),
        "auc": _auc_table(a, pos, neg, codes, q),
        "n_pos": np.bincount(codes[pos], minlength=q).astype(np.float64),
        "n_neg": np.bincount(codes[neg], minlength=q).astype(np.float64),
    }
    point = _figures(np.ones((1, q), dtype=np.int64), sums, levels)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, q, size=(n_boot, q))
    cells_boot = (np.arange(n_boot)[:, None] * q + draws).ravel()
    weights = np.bincount(cells_boot, minlength=n_boot * q).reshape(n_boot, q)
    boot = _figures(weights, sums, levels) if n_boot > 0 else {}
    figures = {}
    for name in FIGURES:
        value = float(point[name][0])
        if n_boot > 0 and np.any(np.isfinite(boot[name])):
            lo, hi = np.nanpercentile(boot[name], [2.5, 97.5])
        else:
            lo = hi = np.nan
        figures[name] = Figure(value, float(lo), float(hi))
    return PairAgreement(
        figures=figures,
        confusion=confusion.sum(axis=0).reshape(levels, levels),
        cuts=tuple(float(c) for c in cuts),
        cuts_b=tuple(float(c) for c in cuts_b),
        n_pairs=len(a),
        n_queries=q,
        spearman_queries=int(rho_valid.sum()),
        spearman_skipped=int(q - rho_valid.sum()),
        n_boot=n_boot,
        seed=seed,
        auc_pairs={"top": int(pos.sum()), "bottom": int(neg.sum())},
    )


def tau_ap(a: np.ndarray, b: np.ndarray) -> float:
    """τ_AP of A's scores against B's ordering (module docstring; B ties keep input order,
    A ties count ½): ``2/(n − 1) Σ_{i=2..n} C(i)/(i − 1) − 1``."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = len(a)
    if n < 2 or len(b) != n:
        raise ValueError("tau_ap needs two score vectors of one length >= 2")
    ranked = a[np.argsort(-b, kind="stable")]
    above = np.triu(np.ones((n, n), dtype=bool), k=1)  # above[j, i]: j ranked above i in B
    correct = (ranked[:, None] > ranked[None, :]) + 0.5 * (ranked[:, None] == ranked[None, :])
    c = (correct * above).sum(axis=0)[1:]
    return float(2.0 / (n - 1) * np.sum(c / np.arange(1, n)) - 1.0)


def kendall_tau_b(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's τ-b (ties corrected): (P − Q) / √((P + Q + T_a)(P + Q + T_b))."""
    return float(kendalltau(a, b, variant="b").statistic)


def swapped_adjacent(names: Sequence[str], a: np.ndarray, b: np.ndarray) -> list[tuple[str, str]]:
    """Pairs adjacent in A's ordering (descending; ties keep input order) that B orders the
    other way round (strictly), each as (A's higher, A's lower)."""
    order = np.argsort(-np.asarray(a, dtype=np.float64), kind="stable")
    b = np.asarray(b, dtype=np.float64)
    return [(names[i], names[j]) for i, j in pairwise(order) if b[j] > b[i]]


def system_agreement(names: Sequence[str], a: np.ndarray, b: np.ndarray) -> dict:
    """Kendall τ-b, τ_AP (A against B's ordering) and the swapped adjacent pairs of A's
    leaderboard, of systems ``names`` scored ``a`` under source A and ``b`` under source B."""
    if len(names) < 2:
        return {"n_systems": len(names), "kendall_tau_b": None, "tau_ap": None, "swaps": []}
    tau = kendall_tau_b(a, b)
    return {
        "n_systems": len(names),
        "kendall_tau_b": None if np.isnan(tau) else tau,
        "tau_ap": tau_ap(a, b),
        "swaps": [list(p) for p in swapped_adjacent(names, a, b)],
    }
