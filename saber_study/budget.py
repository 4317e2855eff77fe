"""Budget curves of the tournament study: judge calls per query vs leaderboard stability, for
Swiss, information pairing and the top-focused adaptive tournament, under each presentation
order (``saber study tournament``, section "budget curves").

The judge is :class:`saber_study.simulation.SimulatedJudge` with a position bias ``b``: shown
``(f, g)`` it perceives ``s_f − s_g + noise·ε_fg + b`` (``ε`` antisymmetric, fixed per pair) and
answers with ``σ(sharpness · perception)``. Orders (:mod:`saber_core.tournament.presentation`, the
build's
code): ``pool_order`` shows the smaller id first, ``seeded_random`` shows the pair swapped where
:func:`saber_core.tournament.presentation.presentation_flips` says so, ``both_orders`` asks both and
averages ``½ (p_ab + 1 − p_ba)`` (two calls). Tournaments are played by
:func:`saber_core.tournament.pairing.run_pairing` (the build's ``plan_round``) for ``n_rounds``
rounds;
the curve's points (``curve_points``) are the first ``R`` rounds of each run (a prefix of a run
is exactly the run with ``R`` rounds: pairing depends only on earlier rounds), the adaptive run's
last point is where every query has stopped or the rounds ran out.

At each point: Bradley–Terry (hard outcomes, L2 ``C``) → ratings (min–max to [0, 5]), and the
leaderboard of ``len(retriever_noise)`` simulated retrievers of graded quality (retriever ``r``
scores ``s + retriever_noise[r] · z_r``, ``z_r ~ N(0, 1)`` per candidate, ``default_rng([seed,
4])``) under these labels vs under the round-robin labels (every pair judged in both orders):
Kendall τ of the leaderboards and mean |ΔnDCG@10|
(:mod:`saber_core.validity.leaderboard_stability`).
Also the share of "first" answers and the group bias of the ratings vs the round-robin ratings.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import expit

from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.comparisons import Comparisons, hard_outcomes
from saber_core.tournament.adaptive import STOPPED, AdaptiveRule
from saber_core.tournament.pairing import AdaptiveResult, run_pairing
from saber_core.tournament.presentation import (
    PRESENTATIONS,
    calls_per_pair,
    first_answer_share,
    group_bias,
    presentation_flips,
)
from saber_core.tournament.swiss import round_robin_pairs
from saber_core.validity.leaderboard_stability import leaderboard, leaderboard_stability
from saber_study.simulation import SimulatedJudge, StudyConfig, simulate_judge

BUDGET_PAIRINGS = ("swiss", "information", "adaptive")
RETRIEVER_STREAM = 4


def adaptive_rule(cfg: StudyConfig) -> AdaptiveRule:
    """The study's adaptive settings as the build's :class:`AdaptiveRule`."""
    return AdaptiveRule(
        warmup=cfg.adaptive_warmup,
        stop_ndcg=cfg.adaptive_stop_ndcg,
        draws=cfg.adaptive_draws,
        min_weight=cfg.adaptive_min_weight,
    )


def shown_perception(judge: SimulatedJudge, q: np.ndarray, f: np.ndarray, g: np.ndarray):
    """The perception of pair ``(f, g)`` shown ``f`` first: the stored perception (built for the
    smaller id shown first, bias included) plus ``2 b`` when ``f`` is the larger id."""
    return judge.perception[q, f, g] + 2.0 * judge.bias * (f > g)


def presented_judge(
    judge: SimulatedJudge, presentation: str, seed: int, first_answers: list[np.ndarray]
) -> Callable[[int, np.ndarray], np.ndarray]:
    """A ``judge(round, pairs)`` for :func:`run_pairing` under ``presentation``: returns P(the
    pair's first, smaller id wins); appends every call's verdict for the candidate shown first
    (1/0) to ``first_answers``."""
    nq = judge.strengths.shape[0]
    q = np.broadcast_to(np.arange(nq)[:, None], (nq, 1))

    def shown(f: np.ndarray, g: np.ndarray, filled: np.ndarray) -> np.ndarray:
        ell = shown_perception(judge, np.broadcast_to(q, f.shape), f, g)
        first_answers.append((ell[filled] > 0).astype(float))
        return expit(judge.sharpness * ell)

    def play(round_index: int, pairs: np.ndarray) -> np.ndarray:
        filled = pairs[..., 0] >= 0
        a, b = np.maximum(pairs[..., 0], 0), np.maximum(pairs[..., 1], 0)
        if presentation == "pool_order":
            p = shown(a, b, filled)
        elif presentation == "both_orders":
            p = 0.5 * (shown(a, b, filled) + 1.0 - shown(b, a, filled))
        else:
            flip = presentation_flips(seed, round_index + 1, pairs)
            p_first = shown(np.where(flip, b, a), np.where(flip, a, b), filled)
            p = np.where(flip, 1.0 - p_first, p_first)
        return np.where(filled, p, np.nan)

    return play


def retriever_scores(strengths: np.ndarray, noise: tuple[float, ...], seed: int) -> np.ndarray:
    """(R, Q, n) scores of retrievers of graded quality (module docstring)."""
    rng = np.random.default_rng([seed, RETRIEVER_STREAM])
    z = rng.standard_normal((len(noise), *strengths.shape))
    return strengths[None] + np.asarray(noise)[:, None, None] * z


def round_robin_ratings(judge: SimulatedJudge, C: float) -> np.ndarray:
    """Ratings (Q, n) of the round robin judged in both orders (the reference labels)."""
    nq, n = judge.strengths.shape
    rr = round_robin_pairs(n)
    q = np.repeat(np.arange(nq), len(rr))
    a, b = np.tile(rr[:, 0], nq), np.tile(rr[:, 1], nq)
    p = 0.5 * (
        expit(judge.sharpness * shown_perception(judge, q, a, b))
        + 1.0
        - expit(judge.sharpness * shown_perception(judge, q, b, a))
    )
    return rescale_ratings(fit_bradley_terry(Comparisons(q, a, b, hard_outcomes(p), nq, n), C=C))


def _prefix(result: AdaptiveResult, rounds: int) -> Comparisons:
    rows = result.comparisons()
    return rows.select(result.rounds_of_rows() < rounds)


def curve(
    result: AdaptiveResult,
    presentation: str,
    points: list[int],
    scores: np.ndarray,
    reference: np.ndarray,
    C: float,
) -> list[dict]:
    """One point per prefix length: calls per query, leaderboard τ, |ΔnDCG@10|, group bias."""
    out = []
    nq = result.wins.shape[0]
    for rounds in points:
        rows = _prefix(result, rounds)
        ratings = rescale_ratings(fit_bradley_terry(rows, C=C))
        board = leaderboard_stability(scores, ratings, reference)
        out.append(
            {
                "rounds": rounds,
                "calls_per_query": len(rows) * calls_per_pair(presentation) / nq,
                "leaderboard_tau": board.tau,
                "mean_abs_delta_ndcg": board.mean_abs_error,
                "max_abs_delta_ndcg": board.max_abs_error,
                "group_bias": group_bias(ratings, reference),
            }
        )
    return out


def stopped_round(result: AdaptiveResult) -> int:
    """The first round after which every query has stopped (else the number of rounds)."""
    done = np.isin(result.status, STOPPED).all(axis=1)
    return int(np.argmax(done)) if done.any() else result.status.shape[0]


def budget_curves(cfg: StudyConfig, log: Callable[[str], None] | None = None) -> dict:
    """Every pairing × presentation order at the main judge noise with position bias
    ``curve_position_bias``: its curve, stop reasons, position-bias share; and the targets."""
    nq, n = cfg.n_queries, cfg.n_players
    judge = simulate_judge(
        nq,
        n,
        cfg.strength_sd,
        cfg.judge_noise,
        cfg.curve_position_bias,
        cfg.soft_sharpness,
        cfg.seed,
    )
    scores = retriever_scores(judge.strengths, cfg.retriever_noise, cfg.seed)
    reference = round_robin_ratings(judge, cfg.C)
    truth_board = leaderboard_stability(scores, rescale_ratings(judge.strengths), reference)
    rule = adaptive_rule(cfg)
    rows = []
    for presentation in PRESENTATIONS:
        for pairing in BUDGET_PAIRINGS:
            answers: list[np.ndarray] = []
            play = presented_judge(judge, presentation, cfg.seed, answers)
            result = run_pairing(
                nq, n, cfg.n_rounds, play, seed=cfg.seed, strategy=pairing, C=cfg.C, rule=rule
            )
            points = [p for p in cfg.curve_points if p <= cfg.n_rounds]
            if pairing == "adaptive":
                points = sorted({*points, stopped_round(result)} - {0})
            final = result.status[-1]
            rows.append(
                {
                    "pairing": pairing,
                    "presentation": presentation,
                    "first_answer_share": first_answer_share(np.concatenate(answers)),
                    "stop_reasons": {
                        s: int((final == s).sum()) for s in ("stable", "exhausted", "playing")
                    },
                    "curve": curve(result, presentation, points, scores, reference, cfg.C),
                }
            )
            if log:
                log(f"budget curve {pairing} / {presentation}: done")
    swiss_calls = cfg.n_rounds * (n // 2)
    return {
        "position_bias": cfg.curve_position_bias,
        "retriever_noise": list(cfg.retriever_noise),
        "reference": "round robin, both orders, hard outcomes",
        "round_robin_leaderboard": leaderboard(scores, reference).tolist(),
        "true_strength_labels_vs_round_robin": {
            "leaderboard_tau": truth_board.tau,
            "mean_abs_delta_ndcg": truth_board.mean_abs_error,
        },
        "swiss_budget_calls": swiss_calls,
        "rows": rows,
        "targets": budget_targets(rows, cfg, swiss_calls),
    }


def holds_from(curve: list[dict], ok) -> float | None:
    """The fewest calls per query from which on ``ok(point)`` holds at every later point of the
    curve (None when it fails at the last point)."""
    points = sorted(curve, key=lambda c: c["calls_per_query"])
    failing = [i for i, c in enumerate(points) if not ok(c)]
    start = failing[-1] + 1 if failing else 0
    return points[start]["calls_per_query"] if start < len(points) else None


def budget_targets(rows: list[dict], cfg: StudyConfig, swiss_calls: int) -> dict:
    """Per pairing × order: the fewest calls per query from which on the leaderboard τ target
    holds, and from which on both targets hold; whether that is ≤ 50% of Swiss-R's calls."""

    def tau_ok(c: dict) -> bool:
        return c["leaderboard_tau"] >= cfg.leaderboard_tau_target

    def both_ok(c: dict) -> bool:
        return tau_ok(c) and c["mean_abs_delta_ndcg"] <= cfg.ndcg_error_target

    out = {}
    for row in rows:
        first_tau, first_both = holds_from(row["curve"], tau_ok), holds_from(row["curve"], both_ok)
        out[f"{row['pairing']}/{row['presentation']}"] = {
            "calls_for_tau": first_tau,
            "calls_for_both": first_both,
            "both_within_half_swiss": first_both is not None and first_both <= swiss_calls / 2,
        }
    return out
