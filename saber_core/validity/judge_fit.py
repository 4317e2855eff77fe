"""Fit the label-budget study's judge (``saber_study.label_budget.world``) to a judge probe.

The study's judge, shown ``(f, g)`` (``f`` first), answers "f" iff::

    (s_f − s_g) + η_fg + τ ε_k + β₀ exp(−|s_f − s_g| / w) > 0

with ``η_fg ~ N(0, σ²)`` fixed per pair (antisymmetric), ``ε_k`` standard logistic per call, and
the position bias peaking at ``β₀`` for equal candidates. A probe (:mod:`.judge_probe`) shows
pairs ``(a, b)`` with a reference gap ``Δ = s_a − s_b`` in both orders ``o = ±1`` (``+1``: ``a``
first), several times each. Given the pair's ``η`` the calls are independent, and ``a`` wins a
call with probability::

    P(a | η, o) = σ((Δ + η + o β₀ e^{−|Δ|/w}) / τ)            (a step function when τ = 0)

The estimator is maximum likelihood over pairs, integrating ``η`` out::

    L = ∏_pairs ∫ ∏_calls P(a | η, o)^y (1 − P(a | η, o))^{1−y} φ(η; 0, σ²) dη

in a parametrization that stays finite for any judge (a perfect one, a coin, a greedy one):
in units of the total noise ``V = √(σ² + τ² π²/3)``,

* ``λ = 1 / V`` — signal: the judge's logit per unit of reference gap (0: no signal);
* ``ρ = σ² / V²`` — the share of the noise fixed per pair (1: a greedy judge, τ = 0);
* ``b = β₀ / V`` — the position bias; ``w`` — its width, in gap units.

Back in the study's units: ``σ = √ρ / λ``, ``τ = √(3 (1 − ρ)) / (π λ)``, ``β₀ = b / λ``. The
integral is a midpoint sum over nodes ``u`` of the standard normal (``η = σ u``) weighted by
``Φ(u_{i+1}) − Φ(u_i)``, with extra nodes around each pair's two transition points (where a
call's probability moves from 0 to 1), so the likelihood stays smooth in the parameters even
for τ = 0. Uncertainty: percentile intervals of a seeded bootstrap over pairs; for the signal
``λ`` the profile-likelihood interval and a likelihood-ratio test of ``λ = 0``.

**Decisions from the likelihood, not from where the optimizer stops** (in a flat likelihood
that point is arbitrary: it moves with the starting point and the BLAS kernel). With the
profile likelihood ``ℓ_i(v) = max ℓ(θ) over θ with θ_i = v`` and ``LR_i(v) = 2 (ℓ̂ − ℓ_i(v))``:

* an estimate is put at a bound ``v`` of its parameter when the likelihood is flat up to it,
  ``ℓ(θ̂ with θ_i = v) ≥ ℓ̂ − FLAT`` (``FLAT`` = 0.01), the other parameters then refitted;
* a parameter is *not identified* towards a bound when its 95% profile interval reaches it,
  ``LR_i(v) ≤ χ²₁(0.95) = 3.84``; the bias width also when ``LR_b(0) ≤ 3.84`` (no bias to
  measure it by); ``judge_model`` is None when the signal's interval reaches 0.

What the probe cannot tell apart: the pair-level noise ``σ²`` is everything fixed per pair —
the study's ``η`` plus its intransitive term (variance ``2γ²``) and per-candidate taste
(``2 δ²``); the split needs designed triangles and repeated candidates. ``judge_model`` keeps
the study's intransitivity ``γ`` and gives ``η`` the rest. The gap's scale is the reference's
(a noisy reference attenuates ``λ``: the fitted noise is the judge's noise *relative to that
reference*, an upper bound on its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq, minimize
from scipy.special import expit, ndtr
from scipy.stats import chi2

PARAMETERS = ("signal", "pair_share", "bias", "bias_width")
BOUNDS = ((-5.0, 40.0), (0.0, 1.0), (-8.0, 8.0), (math.log(0.05), math.log(20.0)))
STARTS = (
    (0.5, 0.5, 0.0, math.log(1.0)),
    (2.0, 0.9, 1.0, math.log(0.5)),
    (0.3, 0.2, 2.0, math.log(3.0)),
    (1.0, 0.95, -1.0, math.log(1.0)),
)
FLAT = 0.01  # log-likelihood units: a bound this close to the maximum is the estimate
_BASE_NODES = np.linspace(-8.4, 8.4, 85)
_STEP_OFFSETS = np.array(
    [-30, -12, -6, -4, -2.5, -1.5, -0.8, -0.3, 0.0, 0.3, 0.8, 1.5, 2.5, 4, 6, 12, 30], dtype=float
)  # fmt: skip


@dataclass(frozen=True)
class PairCounts:
    """Per pair: the reference gap and the calls won by ``a`` in each presentation order."""

    gap: np.ndarray  # (N,) Δ = s_a − s_b, in the study's strength units
    shown_a_first: np.ndarray  # (N,) calls with a first
    a_won_first: np.ndarray  # (N,) of those, calls a won
    shown_b_first: np.ndarray  # (N,) calls with b first
    a_won_second: np.ndarray  # (N,) of those, calls a won

    @classmethod
    def from_calls(
        cls, pair: np.ndarray, gap: np.ndarray, a_first: np.ndarray, a_wins: np.ndarray
    ) -> PairCounts:
        """Counts from one row per call (``pair`` index, the pair's ``gap``, ``a_first``,
        ``a_wins`` 1/0, NaN = dropped and ignored)."""
        pair, a_first, a_wins = np.asarray(pair), np.asarray(a_first, bool), np.asarray(a_wins)
        keep = ~np.isnan(a_wins)
        pair, a_first, won = pair[keep], a_first[keep], a_wins[keep]
        ids, inv = np.unique(pair, return_inverse=True)
        n = len(ids)
        g = np.zeros(n)
        g[inv] = np.asarray(gap, dtype=float)[keep]
        return cls(
            gap=g,
            shown_a_first=np.bincount(inv, a_first, n),
            a_won_first=np.bincount(inv, a_first * won, n),
            shown_b_first=np.bincount(inv, ~a_first, n),
            a_won_second=np.bincount(inv, ~a_first * won, n),
        )

    def take(self, idx: np.ndarray) -> PairCounts:
        """The pairs ``idx`` (a bootstrap resample)."""
        return PairCounts(*(np.asarray(x)[idx] for x in self.__dict__.values()))

    @property
    def n_pairs(self) -> int:
        """Number of pairs."""
        return len(self.gap)

    @property
    def repeated(self) -> bool:
        """Some pair was called at least twice in the same order (call noise identifiable)."""
        return bool(np.any(self.shown_a_first >= 2) or np.any(self.shown_b_first >= 2))


def world_units(theta: np.ndarray) -> dict[str, float]:
    """``(λ, ρ, b, log w)`` → the study's ``pair_noise σ``, ``call_noise τ``, ``bias_peak β₀``
    and ``bias_width w`` (``inf`` where ``λ ≤ 0``: no signal to measure the noise against)."""
    lam, rho, b, log_w = (float(x) for x in theta)
    w = math.exp(log_w)
    if lam <= 0:
        return {"pair_noise": math.inf, "call_noise": math.inf, "bias_peak": math.copysign(
            math.inf, b) if b else 0.0, "bias_width": w}  # fmt: skip
    return {
        "pair_noise": math.sqrt(rho) / lam,
        "call_noise": math.sqrt(3.0 * (1.0 - rho)) / (math.pi * lam),
        "bias_peak": b / lam,
        "bias_width": w,
    }


def _nodes(counts: PairCounts, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: sorted nodes ``u`` (N, M) and the normal mass between neighbours (N, M − 1)."""
    lam, rho, b, log_w = theta
    sd_pair, c = math.sqrt(rho), math.sqrt(3.0 * (1.0 - rho)) / math.pi
    bias = b * np.exp(-np.abs(counts.gap) / math.exp(log_w))
    n = counts.n_pairs
    extra = []
    if sd_pair > 1e-9:
        for sign in (1.0, -1.0):  # where a's probability crosses ½, shown first / second
            centre = -(lam * counts.gap + sign * bias) / sd_pair
            width = max(c / sd_pair, 1e-6)
            extra.append(centre[:, None] + width * _STEP_OFFSETS[None, :])
    u = np.concatenate([np.broadcast_to(_BASE_NODES, (n, len(_BASE_NODES))), *extra], axis=1)
    u = np.sort(np.clip(u, -9.0, 9.0), axis=1)
    return u, np.diff(ndtr(u), axis=1)


def _win_probability(counts: PairCounts, theta: np.ndarray, u: np.ndarray, sign: float):
    """P(a wins | u) for a shown first (``sign`` +1) or second (−1), at nodes ``u`` (N, M)."""
    lam, rho, b, log_w = theta
    c = math.sqrt(3.0 * (1.0 - rho)) / math.pi
    bias = b * np.exp(-np.abs(counts.gap) / math.exp(log_w))
    margin = (lam * counts.gap + sign * bias)[:, None] + math.sqrt(rho) * u
    if c < 1e-9:
        return (margin > 0).astype(float) + 0.5 * (margin == 0)
    return expit(margin / c)


def integrate(counts: PairCounts, theta: np.ndarray, fn) -> np.ndarray:
    """``∫ fn(p_first(u), p_second(u)) φ(u) du`` per pair, where ``p_first`` / ``p_second`` is
    P(a wins a call) with ``a`` shown first / second given the pair's ``η = σ u``."""
    u, mass = _nodes(counts, theta)
    mid = 0.5 * (u[:, 1:] + u[:, :-1])
    p_f = _win_probability(counts, theta, mid, 1.0)
    p_s = _win_probability(counts, theta, mid, -1.0)
    return (fn(p_f, p_s) * mass).sum(axis=1)


def log_likelihood(counts: PairCounts, theta: np.ndarray) -> float:
    """The marginal log-likelihood of the module docstring."""
    c = counts

    def calls(p_f: np.ndarray, p_s: np.ndarray) -> np.ndarray:
        def power(p, k):  # p^k for small integer counts k (0^0 = 1)
            out = np.ones_like(p)
            for j in range(1, int(k.max(initial=0)) + 1):
                out = np.where(k[:, None] >= j, out * p, out)
            return out

        return (
            power(p_f, c.a_won_first)
            * power(1 - p_f, c.shown_a_first - c.a_won_first)
            * power(p_s, c.a_won_second)
            * power(1 - p_s, c.shown_b_first - c.a_won_second)
        )

    return float(np.log(np.maximum(integrate(counts, theta, calls), 1e-300)).sum())


def _fit_from(
    counts: PairCounts, start: tuple[float, ...], fixed: dict[int, float] | None = None
) -> tuple[np.ndarray, float]:
    """One L-BFGS-B fit from ``start``, the parameters ``fixed`` (index → value) held there;
    the maximizer and ``−ℓ``."""
    bounds = list(BOUNDS)
    x0 = np.asarray(start, dtype=float)
    for i, value in (fixed or {}).items():
        bounds[i], x0[i] = (value, value), value
    if not counts.repeated:  # the pair/call split needs repeated calls: a greedy judge assumed
        bounds[1], x0[1] = (1.0, 1.0), 1.0
    res = minimize(
        lambda x: -log_likelihood(counts, x),
        x0,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": 300},
    )
    return np.asarray(res.x), float(res.fun)


def profile(counts: PairCounts, theta: np.ndarray, index: int, value: float) -> float:
    """The profile log-likelihood ``ℓ_i(v) = max ℓ(θ) over θ with θ_i = v`` (started at
    ``theta``)."""
    return -_fit_from(counts, tuple(theta), {index: value})[1]


def settle_at_bounds(
    counts: PairCounts, theta: np.ndarray, ll: float, fixed: dict[int, float] | None = None
) -> tuple[np.ndarray, float]:
    """``theta`` (a maximum of ``ℓ`` with the parameters ``fixed`` held) with every other
    parameter whose likelihood is flat towards a bound ``v`` put there, in parameter order,
    lower bound first: ``θ_i = v`` when ``ℓ(θ with θ_i = v) ≥ ℓ_best − FLAT`` (so the profile
    ``ℓ_i(v)`` is too), the parameters still free then refitted; the result and its
    log-likelihood (within ``FLAT`` of the best)."""
    fixed = dict(fixed or {})
    best = ll
    for i, (lo, hi) in enumerate(BOUNDS):
        if i in fixed or (i == 1 and not counts.repeated):  # ρ is pinned at 1 already
            continue
        for value in (lo, hi):
            if theta[i] == value:  # there already
                fixed[i] = value
                break
            moved = theta.copy()
            moved[i] = value
            if log_likelihood(counts, moved) >= best - FLAT:
                fixed[i] = value
                theta, nll = _fit_from(counts, tuple(moved), fixed)
                ll, best = -nll, max(best, -nll)
                break
    return theta, ll


def maximize(counts: PairCounts, starts=STARTS) -> tuple[np.ndarray, float]:
    """The maximum-likelihood ``(λ, ρ, b, log w)`` over several starts, with parameters whose
    likelihood is flat towards a bound put there (:func:`settle_at_bounds`), and its
    log-likelihood (``ρ`` is pinned at 1, τ = 0, when no pair was called twice in one order:
    the split of the noise between pair and call is then not identifiable)."""
    best = None
    for start in starts:
        x, nll = _fit_from(counts, start)
        if best is None or nll < best[1]:
            best = (x, nll)
    assert best is not None
    return settle_at_bounds(counts, best[0], -best[1])


def profile_signal(counts: PairCounts, theta: np.ndarray, ll: float, level: float = 0.95) -> dict:
    """The likelihood-ratio test of no signal (two-sided) and the profile-likelihood interval
    of ``λ``::

        LR(λ) = 2 (ℓ̂ − max_{ρ, b, w} ℓ(λ, ρ, b, w)),   interval {λ : LR(λ) ≤ χ²₁(level)}

    (the bootstrap cannot see a flat likelihood: a judge answering by position alone fits any λ
    equally well, and every refit stays where it started)."""
    crit = float(chi2.ppf(level, 1))

    def lr(lam: float) -> float:
        return max(2.0 * (ll - profile(counts, theta, 0, lam)), 0.0)

    def edge(bound: float) -> float:
        if lr(bound) <= crit:
            return bound
        return float(brentq(lambda x: lr(x) - crit, bound, theta[0], xtol=1e-3))

    at_zero = lr(0.0) if theta[0] != 0 else 0.0
    return {
        "ci95": [edge(BOUNDS[0][0]), edge(BOUNDS[0][1])],
        "no_signal_lr": at_zero,
        "no_signal_p": float(chi2.sf(at_zero, 1)),
    }


@dataclass
class JudgeFit:
    """A fitted judge: the estimate, bootstrap intervals, what the data cannot identify."""

    theta: np.ndarray
    log_likelihood: float
    n_pairs: int
    n_calls: int
    bootstrap: np.ndarray  # (B, 4) refits on resampled pairs
    seed: int
    signal: dict = field(default_factory=dict)  # profile_signal
    notes: dict[str, str] = field(default_factory=dict)
    upper_signal: np.ndarray | None = None  # the fit with λ held at its interval's upper end

    def interval(self, values: np.ndarray, level: float = 0.95) -> list[float]:
        """Percentile interval of bootstrap ``values`` (NaN without a bootstrap)."""
        if len(values) == 0:
            return [math.nan, math.nan]
        q = [0.5 * (1 - level), 0.5 * (1 + level)]
        lo, hi = np.quantile(values, q, method="inverted_cdf")  # order statistics: inf is fine
        return [float(lo), float(hi)]

    def summary(self, intransitivity: float = 0.3, item_bias: float = 0.0) -> dict:
        """JSON-able: the fitted parameters in both parametrizations with 95% intervals, the
        study's ``JudgeModel`` fields (``judge_model`` None when the signal's 95% interval
        reaches 0; ``judge_model_upper_signal`` from :attr:`upper_signal`), and what is not
        identified."""
        names = ("signal", "pair_share", "bias", "bias_width")
        fitted = {}
        for i, name in enumerate(names):
            est = float(self.theta[i]) if i < 3 else math.exp(self.theta[i])
            boot = self.bootstrap[:, i] if i < 3 else np.exp(self.bootstrap[:, i])
            fitted[name] = {"estimate": est, "ci95": self.interval(boot)}
        if self.signal:
            fitted["signal"].update(self.signal)  # the profile interval and the no-signal test
        world = world_units(self.theta)
        boots = [world_units(t) for t in self.bootstrap]
        study = {}
        for name, est in world.items():
            study[name] = {
                "estimate": est,
                "ci95": self.interval(np.array([b[name] for b in boots])),
            }
        judge = study_judge(world, intransitivity, item_bias)
        if fitted["signal"]["ci95"][0] <= 0:  # no measurable signal: no noise level to report
            judge = None
        upper = None
        if self.upper_signal is not None:
            upper = study_judge(world_units(self.upper_signal), intransitivity, item_bias)
        return {
            "n_pairs": self.n_pairs,
            "n_calls": self.n_calls,
            "log_likelihood": self.log_likelihood,
            "bootstrap": {"replicates": len(self.bootstrap), "seed": self.seed},
            "parameters": fitted,
            "study_units": study,
            "judge_model": judge,
            "judge_model_upper_signal": upper,
            "not_identified": self.notes,
        }


def study_judge(world: dict[str, float], intransitivity: float, item_bias: float) -> dict | None:
    """The study's ``JudgeModel`` fields from fitted study units: the pair-level noise ``σ²``
    split into the study's intransitive term ``2γ²``, taste ``2δ²`` and ``η²`` (the rest; γ is
    lowered when ``σ`` is smaller); None when the judge shows no signal (``σ`` infinite)."""
    total = world["pair_noise"]
    if not math.isfinite(total) or not math.isfinite(world["call_noise"]):
        return None
    gamma = min(intransitivity, math.sqrt(max(total**2 - 2 * item_bias**2, 0.0) / 2))
    return {
        "pair_noise": math.sqrt(max(total**2 - 2 * gamma**2 - 2 * item_bias**2, 0.0)),
        "call_noise": world["call_noise"],
        "bias_peak": world["bias_peak"],
        "bias_width": world["bias_width"],
        "intransitivity": gamma,
        "item_bias": item_bias,
    }


def identification_notes(
    counts: PairCounts, theta: np.ndarray, ll: float, signal: dict, level: float = 0.95
) -> dict:
    """What the probe's data cannot pin down (name → why), from profile likelihood ratios
    ``LR_i(v) = 2 (ℓ̂ − ℓ_i(v))`` against ``χ²₁(level)`` (module docstring)."""
    crit = float(chi2.ppf(level, 1))

    def lr(index: int, value: float) -> float:
        return max(2.0 * (ll - profile(counts, theta, index, value)), 0.0)

    notes = {
        "intransitivity": "fixed per pair like η: the probe measures their sum (σ² = η² + 2γ²); "
        "the study's γ is kept and η gets the rest",
        "item_bias": "per-candidate taste is fixed per pair too; kept at the study's value",
        "pointwise_noise": "a pointwise grader is another prompt; not probed",
    }
    if not counts.repeated:
        notes["call_noise"] = (
            "no pair was asked twice in one order: the split of the noise between pair and "
            "call is not identified; fitted as a greedy judge (call_noise 0)"
        )
    if signal["ci95"][1] < 0:
        notes["signal"] = (
            f"the 95% profile interval of the signal λ lies below 0 (no-signal test p = "
            f"{signal['no_signal_p']:.2g}): the judge prefers the candidate the reference ranks "
            "lower, so it has no noise level in the study's units (a judge there follows the gap)"
        )
    elif signal["ci95"][0] <= 0:
        notes["signal"] = (
            f"the 95% profile interval of the signal λ reaches 0 (no-signal test p = "
            f"{signal['no_signal_p']:.2g}): the judge's answers do not follow the reference gap "
            "measurably, so its noise and bias in the study's units are unbounded above"
        )
    peak = [v for v in BOUNDS[2] if lr(2, v) <= crit]
    if len(peak) == 2:
        notes["bias_peak"] = f"the 95% profile interval of the bias spans both bounds ±{peak[1]:g}"
    elif peak:
        notes["bias_peak"] = (
            f"the 95% profile interval of the bias b reaches its bound {peak[0]:+g} noise sd: the "
            "data do not bound the bias's size above (a judge answering by position almost "
            "always fits)"
        )
    lo, hi = (math.exp(v) for v in BOUNDS[3])
    if (none := lr(2, 0.0)) <= crit:
        notes["bias_width"] = (
            f"no position bias distinguishable from 0 (LR of b = 0: {none:.2g} ≤ {crit:.2f}): "
            "its width is not identified"
        )
    else:
        reach_lo, reach_hi = (lr(3, v) <= crit for v in BOUNDS[3])
        if reach_lo and reach_hi:
            notes["bias_width"] = f"the 95% profile interval spans both bounds, {lo:g} to {hi:g}"
        elif reach_hi:
            notes["bias_width"] = (
                f"the 95% profile interval reaches the upper bound {hi:g}: the bias does not "
                "fade measurably over the probed gaps (a constant position bias fits)"
            )
        elif reach_lo:
            notes["bias_width"] = (
                f"the 95% profile interval reaches the lower bound {lo:g}: only the closest "
                "pairs show it"
            )
    return notes


def fit_judge(counts: PairCounts, n_calls: int, bootstrap: int = 200, seed: int = 0) -> JudgeFit:
    """Maximum likelihood (module docstring), ``bootstrap`` refits on pairs resampled with
    ``default_rng(seed)`` (each started at the estimate) for the intervals, the profile
    likelihood of the signal (:func:`profile_signal`) and the fit with the signal held at the
    upper end of its interval (``upper_signal``, None when that end is ≤ 0)."""
    if counts.n_pairs < 5:
        raise ValueError(f"need at least 5 judged pairs to fit a judge, got {counts.n_pairs}")
    theta, ll = maximize(counts)
    rng = np.random.default_rng(seed)
    boot = np.empty((bootstrap, 4))
    for i in range(bootstrap):
        idx = rng.integers(0, counts.n_pairs, counts.n_pairs)
        boot[i] = _fit_from(counts.take(idx), tuple(theta))[0]
    signal = profile_signal(counts, theta, ll)
    notes = identification_notes(counts, theta, ll, signal)
    upper = None
    if (hi := signal["ci95"][1]) > 0:
        x, nll = _fit_from(counts, tuple(theta), {0: hi})
        upper = settle_at_bounds(counts, x, -nll, {0: hi})[0]
    return JudgeFit(theta, ll, counts.n_pairs, n_calls, boot, seed, signal, notes, upper)


def predicted_figures(counts: PairCounts, theta: np.ndarray) -> dict[str, np.ndarray]:
    """The fitted judge's expectations per pair: P(first answer) with a first and with b first,
    P(a wins) averaged over the orders, test–retest agreement of two calls in one order, and
    order-swap consistency (the same candidate wins in both orders)."""
    p_first_a = integrate(counts, theta, lambda f, s: f)
    p_first_b = integrate(counts, theta, lambda f, s: 1 - s)
    return {
        "first_answer_a_first": p_first_a,
        "first_answer_b_first": p_first_b,
        "a_wins": 0.5 * (p_first_a + 1 - p_first_b),
        "test_retest": integrate(
            counts, theta, lambda f, s: 0.5 * (f**2 + (1 - f) ** 2 + s**2 + (1 - s) ** 2)
        ),
        "order_swap_consistency": integrate(counts, theta, lambda f, s: f * s + (1 - f) * (1 - s)),
    }
