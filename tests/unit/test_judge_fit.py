"""Fitting the study's judge to probe calls: the likelihood against a direct quadrature of the
formula, recovery of known parameters from calls simulated by the study's own world
(``saber_study.label_budget.world``, an independent implementation of the judge), and what the
fit says about a judge without signal."""

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import chi2, norm

from saber_core.validity.judge_fit import (
    BOUNDS,
    FLAT,
    PairCounts,
    fit_judge,
    identification_notes,
    log_likelihood,
    maximize,
    predicted_figures,
    settle_at_bounds,
    study_judge,
    world_units,
)
from saber_study.label_budget.world import JudgeModel, simulate_queries


def theta_of(pair_noise: float, call_noise: float, bias: float, width: float) -> np.ndarray:
    """The fit's parametrization of a study judge (total pair-level noise ``pair_noise``)."""
    v = math.sqrt(pair_noise**2 + call_noise**2 * math.pi**2 / 3)
    return np.array([1 / v, pair_noise**2 / v**2, bias / v, math.log(width)])


def probe_world(model: JudgeModel, n_queries: int, per_query: int, repeats: int = 2, seed=3):
    """A probe of the world's judge: distinct random pairs of Gaussian-shape queries (ids 0, 3, …),
    each shown ``repeats`` times in both orders, every call its own call index ``k`` (fresh
    call noise). Returns the counts, the true pair-level noise and the raw calls."""
    n = 30
    world = simulate_queries(seed, np.arange(n_queries) * 3, n, model)
    rng = np.random.default_rng(7)
    iu, ju = np.triu_indices(n, k=1)
    pick = np.concatenate([rng.choice(len(iu), per_query, replace=False) for _ in range(n_queries)])
    q = np.repeat(np.arange(n_queries), per_query)
    lo, hi = iu[pick], ju[pick]
    pairs, firsts, wins = [], [], []
    for r in range(repeats):
        for o, lo_first in enumerate((True, False)):
            k = np.full(len(q), 2 * r + o)
            y = world.call(q, lo, hi, k, np.full(len(q), lo_first))  # 1 = lo won
            pairs.append(np.arange(len(q)))
            firsts.append(np.full(len(q), lo_first))
            wins.append(y)
    gap = world.strengths[q, lo] - world.strengths[q, hi]
    pair = np.concatenate(pairs)
    counts = PairCounts.from_calls(pair, gap[pair], np.concatenate(firsts), np.concatenate(wins))
    total = math.sqrt(model.pair_noise**2 + 2 * model.intransitivity**2 + 2 * model.item_bias**2)
    return counts, total


def brute_force_likelihood(counts: PairCounts, theta: np.ndarray) -> float:
    """``∏ ∫ ∏ σ((Δ + η ± β₀ e^{−|Δ|/w}) / τ)^y (1 − …)^{1−y} φ(η; σ) dη`` by adaptive
    quadrature over η, in the study's units (a step function where τ = 0)."""
    w = world_units(theta)
    sd, tau, beta, width = w["pair_noise"], w["call_noise"], w["bias_peak"], w["bias_width"]
    total = 0.0
    for i in range(counts.n_pairs):
        d = counts.gap[i]
        bias = beta * math.exp(-abs(d) / width)

        def p_a(eta, sign, d=d, bias=bias):
            m = d + eta + sign * bias
            return (1.0 if m > 0 else 0.0) if tau == 0 else 1 / (1 + math.exp(-m / tau))

        def integrand(eta, i=i):
            pf, ps = p_a(eta, 1), p_a(eta, -1)
            k1, n1 = counts.a_won_first[i], counts.shown_a_first[i]
            k2, n2 = counts.a_won_second[i], counts.shown_b_first[i]
            value = pf**k1 * (1 - pf) ** (n1 - k1) * ps**k2 * (1 - ps) ** (n2 - k2)
            return value * norm.pdf(eta, scale=sd)

        breaks = sorted({-(d + bias), -(d - bias)})
        value, _ = quad(integrand, -10 * sd, 10 * sd, points=breaks, limit=200)
        total += math.log(value)
    return total


GREEDY = JudgeModel(pair_noise=0.8, call_noise=0.0, bias_peak=2.0, bias_width=0.5, intransitivity=0)


@pytest.mark.parametrize(
    ("model", "params"),
    [
        (JudgeModel(), (1.1, 0.7, 1.0, 1.0)),
        (GREEDY, (0.8, 0.0, 2.0, 0.5)),  # τ = 0: a step function of η
        (GREEDY, (0.9, 0.05, 1.5, 0.6)),  # a transition narrower than the grid
        (JudgeModel(), (0.5, 1.5, -0.7, 3.0)),
    ],
)
def test_log_likelihood_equals_direct_quadrature(model, params):
    counts, _ = probe_world(model, 2, 6)
    theta = theta_of(*params)
    assert log_likelihood(counts, theta) == pytest.approx(
        brute_force_likelihood(counts, theta), rel=2e-3
    )


def test_world_units_invert_the_parametrization():
    w = world_units(theta_of(1.2, 0.4, 0.9, 0.7))
    assert [w[k] for k in ("pair_noise", "call_noise", "bias_peak", "bias_width")] == (
        pytest.approx([1.2, 0.4, 0.9, 0.7])
    )
    assert math.isinf(world_units(np.array([0.0, 0.5, 1.0, 0.0]))["pair_noise"])


@pytest.mark.parametrize(
    "model",
    [
        JudgeModel(),  # the study's default judge: η 1.0, τ 0.7, β₀ 1.0, w 1.0, γ 0.3
        GREEDY,
    ],
)
def test_maximum_likelihood_recovers_the_world_judge(model):
    counts, total = probe_world(model, 30, 50)  # 1,500 pairs × 4 calls
    theta, ll = maximize(counts)
    truth = theta_of(total, model.call_noise, model.bias_peak, model.bias_width)
    # the truth lies in the 99% likelihood-ratio region of the estimate (4 parameters)
    assert 2 * (ll - log_likelihood(counts, truth)) <= chi2.ppf(0.99, 4)
    got = world_units(theta)
    assert got["pair_noise"] == pytest.approx(total, abs=0.15)
    assert got["call_noise"] == pytest.approx(model.call_noise, abs=0.1)
    assert got["bias_peak"] == pytest.approx(model.bias_peak, abs=0.25)
    assert got["bias_width"] == pytest.approx(model.bias_width, rel=0.35)
    # the study's fields: η gets the pair-level noise beyond the kept intransitivity
    fields = study_judge(got, model.intransitivity, 0.0)
    assert fields["pair_noise"] ** 2 + 2 * fields["intransitivity"] ** 2 == pytest.approx(
        got["pair_noise"] ** 2
    )
    assert fields["intransitivity"] == model.intransitivity


def test_fit_judge_intervals_and_notes():
    model = JudgeModel(intransitivity=0.0)  # pair-level noise exactly normal, as fitted
    counts, total = probe_world(model, 10, 30, seed=11)  # 300 pairs, a probe's size
    fit = fit_judge(counts, 4 * counts.n_pairs, bootstrap=20, seed=2)
    s = fit.summary(intransitivity=0.0)
    assert s["bootstrap"] == {"replicates": 20, "seed": 2}
    truth = {"pair_noise": total, "call_noise": 0.7, "bias_peak": 1.0, "bias_width": 1.0}
    boots = [world_units(t) for t in fit.bootstrap]
    for name in truth:
        est = s["study_units"][name]["estimate"]
        lo, hi = s["study_units"][name]["ci95"]
        assert lo <= est <= hi, name
    # the noise terms are well determined at a probe's size: the truth within 3 bootstrap SEs;
    # the bias peak and width trade off against each other, so they are checked jointly: the
    # truth lies in the 99% likelihood-ratio region of the estimate (4 parameters)
    for name in ("pair_noise", "call_noise"):
        se = np.std([b[name] for b in boots])
        assert abs(s["study_units"][name]["estimate"] - truth[name]) <= 3 * se, (name, se)
    theta_true = theta_of(total, 0.7, 1.0, 1.0)
    assert 2 * (fit.log_likelihood - log_likelihood(counts, theta_true)) <= chi2.ppf(0.99, 4)
    sig = s["parameters"]["signal"]
    assert sig["ci95"][0] < sig["estimate"] < sig["ci95"][1] and sig["ci95"][0] > 0
    assert sig["no_signal_p"] < 1e-6  # this judge follows the gap
    assert set(s["not_identified"]) == {"intransitivity", "item_bias", "pointwise_noise"}
    assert s["judge_model"]["call_noise"] == pytest.approx(
        s["study_units"]["call_noise"]["estimate"]
    )
    upper = s["judge_model_upper_signal"]
    assert upper["call_noise"] < s["judge_model"]["call_noise"]  # more signal: less noise
    again = fit_judge(counts, 4 * counts.n_pairs, bootstrap=20, seed=2)
    assert np.array_equal(again.bootstrap, fit.bootstrap)  # seeded


def position_only_counts(n: int = 200) -> PairCounts:
    """``n`` pairs, each asked twice per order, of a judge that always answers "first"."""
    gap = np.random.default_rng(0).uniform(0, 4, n)
    pair = np.r_[np.arange(n), np.arange(n), np.arange(n), np.arange(n)]
    a_first = np.r_[np.ones(2 * n, bool), np.zeros(2 * n, bool)]
    return PairCounts.from_calls(pair, gap[pair], a_first, a_first.astype(float))


def test_a_judge_answering_by_position_only_has_no_signal():
    counts = position_only_counts()
    fit = fit_judge(counts, 4 * counts.n_pairs, bootstrap=5, seed=0)
    s = fit.summary()
    assert fit.log_likelihood == pytest.approx(0.0, abs=FLAT)  # every call explained
    notes = s["not_identified"]
    assert "signal" in notes and "bias_peak" in notes and "upper bound" in notes["bias_width"]
    assert s["parameters"]["signal"]["no_signal_p"] > 0.5  # λ = 0 fits as well as any λ
    lo, hi = s["parameters"]["signal"]["ci95"]
    assert lo < 0 < hi
    assert s["judge_model"] is None  # no signal: no noise level in the study's units
    assert s["judge_model_upper_signal"]["bias_peak"] > 5  # the most signal allowed: by position
    assert s["parameters"]["bias"]["estimate"] == BOUNDS[2][1]  # the likelihood is flat up to it


@pytest.mark.parametrize("signal, bias", [(0.157, 7.63), (-0.026, 6.93)])
def test_where_the_optimizer_stops_in_a_flat_likelihood_does_not_matter(signal, bias):
    # stopping points of L-BFGS-B on the judge above, from two starts and two BLAS kernels
    counts = position_only_counts()
    stopped = np.array([signal, 1.0, bias, BOUNDS[3][1]])
    ll = log_likelihood(counts, stopped)
    theta, settled = settle_at_bounds(counts, stopped, ll)
    assert theta[2] == BOUNDS[2][1] and settled >= ll - FLAT
    notes = identification_notes(counts, stopped, ll, {"ci95": [-1.0, 1.0], "no_signal_p": 1.0})
    assert "bias_peak" in notes and "upper bound" in notes["bias_width"]


def test_a_probe_without_repeats_is_fitted_as_greedy():
    counts, _ = probe_world(JudgeModel(call_noise=0.0), 10, 30, repeats=1)
    assert not counts.repeated
    theta, _ = maximize(counts, starts=[(0.5, 0.5, 0.0, 0.0)])
    assert theta[1] == 1.0 and world_units(theta)["call_noise"] == 0.0


def test_predicted_figures_match_the_world_judge_called_many_times():
    model = JudgeModel(pair_noise=0.9, call_noise=0.6, bias_peak=1.2, bias_width=0.8)
    n, k_calls = 30, 400
    world = simulate_queries(5, np.array([0, 3]), n, model)
    iu, ju = np.triu_indices(n, k=1)
    q = np.repeat([0, 1], len(iu))
    a, b = np.tile(iu, 2), np.tile(ju, 2)
    first_a = np.stack([world.call(q, a, b, np.full(len(q), k), np.ones(len(q), bool))
                        for k in range(k_calls)])  # fmt: skip
    first_b = np.stack([world.call(q, a, b, np.full(len(q), k), np.zeros(len(q), bool))
                        for k in range(k_calls, 2 * k_calls)])  # fmt: skip
    gap = world.strengths[q, a] - world.strengths[q, b]
    counts = PairCounts.from_calls(np.arange(len(q)), gap, np.ones(len(q), bool), first_a[0])
    # the world's judge has pair-level noise η + γ u×u; the fit's σ is their total
    total = math.sqrt(model.pair_noise**2 + 2 * model.intransitivity**2)
    pred = predicted_figures(counts, theta_of(total, 0.6, 1.2, 0.8))
    measured_first = 0.5 * (first_a.mean() + (1 - first_b).mean())
    predicted_first = 0.5 * (pred["first_answer_a_first"] + pred["first_answer_b_first"]).mean()
    assert predicted_first == pytest.approx(measured_first, abs=0.02)
    assert pred["a_wins"].mean() == pytest.approx(0.5 * (first_a.mean() + first_b.mean()), abs=0.02)
    retest = 0.5 * ((first_a[0] == first_a[1]).mean() + (first_b[0] == first_b[1]).mean())
    assert pred["test_retest"].mean() == pytest.approx(retest, abs=0.03)


def test_a_judge_preferring_the_lower_ranked_candidate_has_negative_signal():
    counts, _ = probe_world(JudgeModel(intransitivity=0.0), 10, 30, seed=4)
    reversed_reference = PairCounts(-counts.gap, *list(counts.__dict__.values())[1:])
    s = fit_judge(reversed_reference, 4 * counts.n_pairs, bootstrap=3, seed=0).summary()
    lo, hi = s["parameters"]["signal"]["ci95"]
    assert lo < hi < 0 and s["parameters"]["signal"]["no_signal_p"] < 1e-6
    assert "lies below 0" in s["not_identified"]["signal"]
    assert s["judge_model"] is None and s["judge_model_upper_signal"] is None
