"""Probe a pairwise judge: which pairs to ask, and what its answers say (``saber judge probe``).

A probe asks a judge about pairs ``(a, b)`` of a build's candidate pools, each pair in both
orders and several times per order, and reads off how the judge behaves (the fit of the
study's judge to the same calls: :mod:`.judge_fit`).

**Reference gap.** Every pair has a gap ``Δ = s_a − s_b ≥ 0`` from a reference that does not
come from the probed judge (``a`` is the candidate the reference prefers). A reference score
``r`` (a cosine similarity, a rating) is put on the study's strength scale by its spread in the
query's pool: ``s = target_sd · r / sd_q(r)`` (``target_sd`` 1.5, the study's Gaussian
strengths), so ``Δ = target_sd (r_a − r_b) / sd_q(r)``.

**Sample.** The pool pairs of every query are cut into ``bins`` quantile bins of ``Δ``; each bin
gives an equal share of ``n_pairs`` pairs (what a bin lacks goes to the others), drawn without
replacement by ``default_rng(seed)``, so close pairs — where position bias shows most — and far
pairs are both present.

**Figures** (per condition, i.e. temperature; a call's verdict is 1 when ``a`` wins, dropped
calls are left out), each a share ``k / n`` with its Wilson 95% interval::

    (p̂ + z²/2n ± z √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n),  z = 1.96

* test–retest agreement: two calls of one pair in one order (repeat 0 against each later
  repeat) give the same verdict;
* order-swap consistency: the calls of one repeat in the two orders pick the same candidate;
* first-answer share: calls won by the candidate shown first, overall and per gap bin;
* P(a wins): calls won by the reference's preferred candidate, per gap bin (both orders
  equally often, so the position bias cancels).

* logprob signal (judges that report P(first wins)): Spearman's ρ between the gap and the
  judge's order-debiased ``p(a) = (p(a | a first) + 1 − p(b | b first)) / 2`` averaged over
  repeats, per pair, with the Fisher interval ``tanh(atanh ρ ± z √(1.06 / (n − 3)))``.

The share intervals treat calls as independent (calls of one pair are not: read them as a lower
bound on the uncertainty; the fit's bootstrap resamples pairs).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import spearmanr

Z95 = 1.959963984540054


def wilson_interval(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of ``k`` successes in ``n`` trials (module docstring); ``(nan,
    nan)`` for ``n = 0``."""
    if n <= 0:
        return math.nan, math.nan
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    return max(0.0, (centre - half) / denom), min(1.0, (centre + half) / denom)


def share(k: float, n: float) -> dict[str, float | int | list[float]]:
    """``{"share", "k", "n", "ci95"}`` for ``k`` of ``n``."""
    lo, hi = wilson_interval(k, n)
    return {"share": k / n if n else math.nan, "k": int(k), "n": int(n), "ci95": [lo, hi]}


def standardized_gap(
    r_a: np.ndarray, r_b: np.ndarray, pool_sd: np.ndarray, target_sd: float = 1.5
) -> np.ndarray:
    """``Δ = target_sd (r_a − r_b) / sd_q(r)`` (module docstring); 0 where the pool's scores
    do not vary."""
    r_a, r_b, sd = (np.asarray(x, dtype=float) for x in (r_a, r_b, pool_sd))
    return np.divide(target_sd * (r_a - r_b), sd, out=np.zeros(len(r_a)), where=sd > 0)


def gap_bins(gap: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Quantile bin edges of ``|gap|`` (``bins + 1`` values, repeated edges merged) and each
    pair's bin (0-based)."""
    g = np.abs(np.asarray(gap, dtype=float))
    edges = np.unique(np.quantile(g, np.linspace(0, 1, bins + 1)))
    if len(edges) < 2:
        edges = np.array([g.min(), g.max() + 1e-12])
    idx = np.clip(np.searchsorted(edges, g, side="right") - 1, 0, len(edges) - 2)
    return edges, idx


def stratified_sample(bin_of: np.ndarray, n_pairs: int, seed: int) -> np.ndarray:
    """Indices of ``min(n_pairs, N)`` pairs, an equal share from every bin (a bin short of
    its share gives the rest to the others, in bin order), drawn with ``default_rng(seed)``;
    sorted."""
    rng = np.random.default_rng(seed)
    bin_of = np.asarray(bin_of)
    labels = np.unique(bin_of)
    members = {b: rng.permutation(np.flatnonzero(bin_of == b)) for b in labels}
    take = dict.fromkeys(labels, 0)
    left = min(n_pairs, len(bin_of))
    while left > 0:
        open_bins = [b for b in labels if take[b] < len(members[b])]
        quota = max(left // len(open_bins), 1)
        for b in open_bins:
            extra = min(quota, len(members[b]) - take[b], left)
            take[b] += extra
            left -= extra
            if left == 0:
                break
    return np.sort(np.concatenate([members[b][: take[b]] for b in labels]))


def retest_counts(pair: np.ndarray, a_first: np.ndarray, repeat: np.ndarray, a_wins: np.ndarray):
    """``(agreements, comparisons)``: repeat 0 against every later repeat of the same pair and
    order, both answered."""
    pair, a_first, repeat, y = (np.asarray(x) for x in (pair, a_first, repeat, a_wins))
    ok = ~np.isnan(y)
    key = pair * 2 + a_first.astype(int)
    base = {k: v for k, v, r, good in zip(key, y, repeat, ok, strict=True) if r == 0 and good}
    agree = total = 0
    for k, v, r, good in zip(key, y, repeat, ok, strict=True):
        if r > 0 and good and k in base:
            total += 1
            agree += int(v == base[k])
    return agree, total


def swap_counts(pair: np.ndarray, a_first: np.ndarray, repeat: np.ndarray, a_wins: np.ndarray):
    """``(consistent, comparisons)``: the two orders of one pair and repeat pick the same
    candidate, both answered."""
    pair, a_first, repeat, y = (np.asarray(x) for x in (pair, a_first, repeat, a_wins))
    seen: dict[tuple[int, int], dict[bool, float]] = {}
    for p, f, r, v in zip(pair, a_first, repeat, y, strict=True):
        if not np.isnan(v):
            seen.setdefault((int(p), int(r)), {})[bool(f)] = float(v)
    both = [d for d in seen.values() if len(d) == 2]
    return sum(d[True] == d[False] for d in both), len(both)


def logprob_signal(
    pair: np.ndarray, a_first: np.ndarray, p_first: np.ndarray, gap: np.ndarray
) -> dict[str, float | int | list[float]]:
    """Spearman's ρ between ``gap`` and the order-debiased P(a wins) of each pair (module
    docstring), with its Fisher 95% interval; pairs without both orders are left out."""
    pair, a_first = np.asarray(pair), np.asarray(a_first, bool)
    p, gap = np.asarray(p_first, float), np.asarray(gap, float)
    ok = np.isfinite(p)
    ids = np.unique(pair)
    idx = np.searchsorted(ids, pair)
    n = len(ids)
    fwd = np.bincount(idx[ok & a_first], p[ok & a_first], n)
    n_fwd = np.bincount(idx[ok & a_first], minlength=n)
    rev = np.bincount(idx[ok & ~a_first], p[ok & ~a_first], n)
    n_rev = np.bincount(idx[ok & ~a_first], minlength=n)
    both = (n_fwd > 0) & (n_rev > 0)
    g = np.zeros(n)
    g[idx] = gap
    debiased = 0.5 * (fwd[both] / n_fwd[both] + 1.0 - rev[both] / n_rev[both])
    m = int(both.sum())
    if m < 4 or np.ptp(debiased) == 0 or np.ptp(g[both]) == 0:
        return {"spearman": math.nan, "n": m, "ci95": [math.nan, math.nan]}
    rho = float(spearmanr(g[both], debiased).statistic)
    half = Z95 * math.sqrt(1.06 / (m - 3))
    z = math.atanh(min(max(rho, -0.999999), 0.999999))
    return {"spearman": rho, "n": m, "ci95": [math.tanh(z - half), math.tanh(z + half)]}


def probe_figures(
    pair: np.ndarray,
    a_first: np.ndarray,
    repeat: np.ndarray,
    a_wins: np.ndarray,
    gap: np.ndarray,
    bin_of: np.ndarray,
    p_first: np.ndarray | None = None,
) -> dict:
    """The figures of the module docstring for one condition's calls (one row per call: the
    pair's index, ``a_first``, the repeat, ``a_wins`` 1/0/NaN, the pair's ``gap`` and bin, and
    the judge's P(first wins) where it reports one)."""
    pair, a_first, repeat = np.asarray(pair), np.asarray(a_first, bool), np.asarray(repeat)
    y, gap, bin_of = np.asarray(a_wins, float), np.asarray(gap, float), np.asarray(bin_of)
    ok = ~np.isnan(y)
    first = np.where(a_first, y, 1.0 - y)
    out = {
        "n_pairs": len(np.unique(pair)),
        "n_calls": len(y),
        "n_dropped": int((~ok).sum()),
        "test_retest_agreement": share(*retest_counts(pair, a_first, repeat, y)),
        "order_swap_consistency": share(*swap_counts(pair, a_first, repeat, y)),
        "first_answer_share": share(first[ok].sum(), ok.sum()),
        "a_wins": share(y[ok].sum(), ok.sum()),
    }
    p = None if p_first is None else np.asarray(p_first, dtype=float)
    has_p = p is not None and bool(np.isfinite(p).any())
    if has_p:
        out["mean_p_first"] = float(np.nanmean(p))
        out["logprob_signal"] = logprob_signal(pair, a_first, p, gap)
    by_bin = []
    for b in np.unique(bin_of):
        sel = (bin_of == b) & ok
        row = {
            "bin": int(b),
            "n_pairs": len(np.unique(pair[bin_of == b])),
            "mean_gap": float(gap[bin_of == b].mean()),
            "first_answer_share": share(first[sel].sum(), sel.sum()),
            "a_wins": share(y[sel].sum(), sel.sum()),
        }
        if has_p:
            row["mean_p_first"] = float(np.nanmean(p[bin_of == b]))
        by_bin.append(row)
    out["by_gap_bin"] = by_bin
    return out
