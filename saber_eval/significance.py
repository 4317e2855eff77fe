"""Paired significance over queries: sign-flip randomization test and bootstrap CI.

With per-query differences d_i = a_i − b_i (i = 1..n):

* randomization test (two-sided): under H0 the sign of each d_i is exchangeable, so
  p = (1 + #{r : |mean(s_r ⊙ d)| ≥ |mean(d)|}) / (1 + R) over R random sign vectors s_r ∈ {±1}^n
  (seeded); identical systems (d = 0) give p = 1;
* paired bootstrap: resample query indices with replacement B times, the (α/2, 1 − α/2)
  percentiles of mean(d*) form the confidence interval of the mean difference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

CHUNK = 1000


def _diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(
            f"paired scores must be two equal non-empty vectors ({a.shape}, {b.shape})"
        )
    return a - b


def randomization_test(
    a: np.ndarray, b: np.ndarray, n_permutations: int = 10_000, seed: int = 0
) -> float:
    """Two-sided paired sign-flip randomization test p-value of mean(a − b) = 0."""
    d = _diff(a, b)
    observed = abs(d.mean())
    tolerance = 1e-12 * max(1.0, float(np.abs(d).max()))
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, n_permutations, CHUNK):
        size = min(CHUNK, n_permutations - start)
        signs = rng.integers(0, 2, size=(size, len(d)), dtype=np.int8) * 2 - 1
        extreme += int(np.sum(np.abs(signs @ d) / len(d) >= observed - tolerance))
    return (1 + extreme) / (1 + n_permutations)


def bootstrap_ci(
    a: np.ndarray,
    b: np.ndarray,
    n_resamples: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap (1 − α) confidence interval of mean(a − b), queries resampled."""
    d = _diff(a, b)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, CHUNK):
        size = min(CHUNK, n_resamples - start)
        means[start : start + size] = d[rng.integers(0, len(d), size=(size, len(d)))].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


@dataclass(frozen=True)
class Comparison:
    """Retriever A vs B on one setting, paired over the queries both have."""

    a: str
    b: str
    setting: str
    n_queries: int
    mean_a: float
    mean_b: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n_permutations: int
    seed: int

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)

    def describe(self) -> str:
        """One readable line."""
        return (
            f"{self.setting}: {self.a} {self.mean_a:.4f} vs {self.b} {self.mean_b:.4f} "
            f"(n = {self.n_queries}): Δ = {self.difference:+.4f}, 95% CI "
            f"[{self.ci_low:+.4f}, {self.ci_high:+.4f}], randomization p = {self.p_value:.4g}"
        )


def compare(
    a_name: str,
    b_name: str,
    setting: str,
    a: np.ndarray,
    b: np.ndarray,
    n_permutations: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> Comparison:
    """Mean difference, its bootstrap CI and the randomization-test p-value."""
    d = _diff(a, b)
    low, high = bootstrap_ci(a, b, n_permutations, alpha, seed)
    return Comparison(
        a=a_name,
        b=b_name,
        setting=setting,
        n_queries=len(d),
        mean_a=float(np.mean(a)),
        mean_b=float(np.mean(b)),
        difference=float(d.mean()),
        ci_low=low,
        ci_high=high,
        p_value=randomization_test(a, b, n_permutations, seed),
        n_permutations=n_permutations,
        seed=seed,
    )
