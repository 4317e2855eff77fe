"""``saber study budget``: every design × presentation × label scale × budget on ``seeds``
independent leaderboards of ``queries`` simulated queries; one row per design × scale × budget
(docs/budget-study.md).

A seed is one leaderboard: its queries (global ids ``seed · queries + j``), their candidates'
latent strengths, the judge's pair and call noise and the retrievers' scores are drawn once
(:mod:`.world`) and every design, presentation and scale of that seed is measured on them
(common random numbers). Queries are simulated in chunks of ``chunk`` (results do not depend
on the chunk size but for the Swiss tie-breaks, drawn per chunk).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from saber_core.rating.scales import SCALES, scale_ratings
from saber_study.label_budget.designs import DesignConfig, Runner
from saber_study.label_budget.measures import (
    bootstrap_intervals,
    bootstrap_weights,
    dcg10,
    leaderboard_measures,
    normalized,
    top10,
)
from saber_study.label_budget.world import (
    JUDGE_LIKE,
    RETRIEVER_NOISE,
    SHAPES,
    JudgeModel,
    Queries,
    judge_figures,
    simulate_queries,
)

BOOTSTRAP_STREAM = 20
TAU_TARGET = 0.95
LIMIT = "judge_limit"  # labels from the judge's infinite-call view (no design can do better)


@dataclass(frozen=True)
class BudgetStudyConfig:
    """The study's size and settings (all written into budget.json)."""

    seeds: int = 50
    queries: int = 1000
    candidates: int = 150
    chunk: int = 250
    bootstrap: int = 1000
    first_seed: int = 0
    scales: tuple[str, ...] = SCALES
    design: DesignConfig = field(default_factory=DesignConfig)
    judge: JudgeModel = field(default_factory=JudgeModel)
    judge_source: str = ""  # where the judge came from ("": the study's default judge)

    def combos(self) -> list[tuple[str, str, str, int | None]]:
        """(design, presentation, scale, budget) of every measured row; the last rows are the
        judge's limit (``judge_limit``, no budget) of each scale."""
        d = self.design
        rows: list[tuple[str, str, str, int | None]] = [
            (name, pres, scale, budget)
            for name in d.designs
            for pres in d.presentations
            for scale in self.scales
            for budget in d.budgets
        ]
        return rows + [(LIMIT, "none", scale, None) for scale in self.scales]


def scaled(name: str, strengths: np.ndarray, noise: np.ndarray, world: Queries) -> np.ndarray:
    """The labels of a scale (:func:`saber_core.rating.scales.scale_ratings`)."""
    return scale_ratings(name, strengths, noise_var=noise, reference=world.reference)


def chunk_ndcg(world: Queries, cfg: BudgetStudyConfig, stats: dict) -> tuple[np.ndarray, ...]:
    """Per-query nDCG@10 of every retriever: under each row's labels (C, R, Qc), the same DCG
    over the true labels' ideal DCG (C, R, Qc; a diagnostic of the ideal's share of the error)
    and under each scale's true labels (S, R, Qc)."""
    tops = top10(world.scores)
    zero = np.zeros(world.strengths.shape)
    true_parts = [dcg10(scaled(s, world.strengths, zero, world), tops) for s in cfg.scales]
    truth = np.stack([normalized(d, i) for d, i in true_parts])
    combos = cfg.combos()
    est = np.empty((len(combos), world.scores.shape[0], len(world.ids)))
    true_ideal = np.empty_like(est)
    index = {c: i for i, c in enumerate(combos)}

    def record(row: tuple, labels: np.ndarray) -> None:
        dcg, ideal = dcg10(labels, tops)
        est[index[row]] = normalized(dcg, ideal)
        true_ideal[index[row]] = normalized(dcg, true_parts[cfg.scales.index(row[2])][1])

    for name in cfg.design.designs:
        for pres in cfg.design.presentations:
            runner = Runner(world, name, pres, cfg.design)
            fits = runner.run()
            stats.setdefault(f"{name}/{pres}", []).append(runner.first_answer_share())
            for budget, (beta, noise) in fits.items():
                for scale in cfg.scales:
                    record((name, pres, scale, budget), scaled(scale, beta, noise, world))
    for scale in cfg.scales:
        record((LIMIT, "none", scale, None), scaled(scale, world.view, zero, world))
    return est, true_ideal, truth


@dataclass
class SeedResult:
    """One seed's leaderboard measures per row, and the data for coverage and shapes."""

    measures: dict[str, np.ndarray]
    intervals: np.ndarray  # (C, R, 2)
    truth_sum: np.ndarray  # (S, R) sum over the seed's queries of true-label nDCG
    shape_delta: np.ndarray  # (C, shapes, R) leaderboard delta on each shape's queries
    per_query_abs: np.ndarray  # (C,) mean over queries and retrievers of |ΔnDCG@10|
    true_ideal_delta: np.ndarray  # (C, R) leaderboard delta with the true labels' ideal DCG
    truth_board: np.ndarray  # (S, R) the true-label leaderboards


def run_seed(seed: int, cfg: BudgetStudyConfig, stats: dict) -> SeedResult:
    """Simulate one seed's queries chunk by chunk and measure every row."""
    parts_est, parts_ideal, parts_truth, shapes = [], [], [], []
    base = seed * cfg.queries
    for start in range(0, cfg.queries, cfg.chunk):
        ids = np.arange(base + start, base + min(cfg.queries, start + cfg.chunk))
        world = simulate_queries(seed, ids, cfg.candidates, cfg.judge)
        est, true_ideal, truth = chunk_ndcg(world, cfg, stats)
        parts_est.append(est.astype(np.float32))
        parts_ideal.append(true_ideal.mean(axis=-1) * len(ids))
        parts_truth.append(truth.astype(np.float32))
        shapes.append(world.shape)
        del world
    est = np.concatenate(parts_est, axis=-1)
    truth = np.concatenate(parts_truth, axis=-1)
    shape = np.concatenate(shapes)
    scale_of = np.array([cfg.scales.index(c[2]) for c in cfg.combos()])
    truth_rows = truth[scale_of]
    measures = leaderboard_measures(est, truth_rows)
    weights = bootstrap_weights(cfg.queries, cfg.bootstrap, [seed, BOOTSTRAP_STREAM])
    shape_delta = np.stack(
        [est[..., shape == k].mean(axis=-1) - truth_rows[..., shape == k].mean(axis=-1)
         for k in range(len(SHAPES))], axis=1,
    )  # fmt: skip
    return SeedResult(
        measures=measures,
        intervals=bootstrap_intervals(est, weights),
        truth_sum=truth.sum(axis=-1, dtype=np.float64),
        shape_delta=shape_delta,
        per_query_abs=np.abs(est - truth_rows).mean(axis=(1, 2)),
        true_ideal_delta=sum(parts_ideal) / cfg.queries - truth_rows.mean(axis=-1),
        truth_board=truth.mean(axis=-1),
    )


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    se = float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")
    return float(x.mean()), se


def summarize(cfg: BudgetStudyConfig, seeds: list[SeedResult]) -> list[dict]:
    """One row per design × presentation × scale × budget (module docstring of :mod:`.measures`
    for the columns)."""
    n_total = cfg.queries * len(seeds)
    population = sum(s.truth_sum for s in seeds) / n_total  # (S, R)
    known = list(cfg.design.known_retrievers)
    unseen = [r for r in range(len(RETRIEVER_NOISE) + 1) if r not in known]
    rows = []
    for c, (name, pres, scale, budget) in enumerate(cfg.combos()):
        delta = np.stack([s.measures["delta"][c] for s in seeds])  # (seeds, R)
        abs_err = np.abs(delta).mean(axis=1)
        shift = delta.mean(axis=1)
        no_shift = np.abs(delta - shift[:, None]).mean(axis=1)
        tau = np.array([s.measures["tau"][c] for s in seeds])
        mu = population[cfg.scales.index(scale)]
        ci = np.stack([s.intervals[c] for s in seeds])  # (seeds, R, 2)
        covered = (ci[..., 0] <= mu) & (mu <= ci[..., 1])
        mean_abs, se_abs = _mean_se(abs_err)
        shape_abs = np.stack([np.abs(s.shape_delta[c]).mean(axis=-1) for s in seeds])
        rows.append(
            {
                "design": name,
                "presentation": pres,
                "scale": scale,
                "calls_per_query": budget,
                "abs_dndcg": mean_abs,
                "abs_dndcg_shift_removed": float(no_shift.mean()),
                "c": None if budget is None else mean_abs * budget,
                "p_tau_ge_095": float(np.mean(tau >= TAU_TARGET - 1e-12)),
                "tau_ap": float(np.mean([s.measures["tau_ap"][c] for s in seeds])),
                "sig_agreement": float(np.mean([s.measures["sig_agreement"][c] for s in seeds])),
                "reversals": int(sum(int(s.measures["reversals"][c]) for s in seeds)),
                "ci_coverage": float(covered.mean()),
                "seeds": len(seeds),
                "abs_dndcg_se": se_abs,
                "shift": float(shift.mean()),
                "tau_mean": float(tau.mean()),
                "abs_dndcg_unseen": float(np.abs(delta[:, unseen]).mean()),
                "judge_like_delta": float(delta[:, JUDGE_LIKE].mean()),
                "abs_dndcg_per_query": float(np.mean([s.per_query_abs[c] for s in seeds])),
                "abs_dndcg_true_ideal": float(
                    np.mean([np.abs(s.true_ideal_delta[c]).mean() for s in seeds])
                ),
                "abs_dndcg_by_shape": dict(
                    zip(SHAPES, shape_abs.mean(axis=0).tolist(), strict=True)
                ),
            }
        )
    return rows


def run_budget_study(cfg: BudgetStudyConfig, log: Callable[[str], None] | None = None) -> dict:
    """Every seed, then the rows; returns the JSON-able results (deterministic given ``cfg``)."""
    log = log or (lambda _msg: None)
    t0, c0 = time.monotonic(), time.process_time()
    stats: dict = {}
    results = []
    for seed in range(cfg.first_seed, cfg.first_seed + cfg.seeds):
        results.append(run_seed(seed, cfg, stats))
        log(f"seed {seed}: done ({time.monotonic() - t0:.0f} s)")
    boards = np.stack([s.truth_board for s in results])  # (seeds, S, R)
    rows = summarize(cfg, results)
    return {
        "config": asdict(cfg),
        "retriever_noise": list(RETRIEVER_NOISE),
        "judge_like_retriever": JUDGE_LIKE,
        "true_label_leaderboard": {
            scale: boards[:, i].mean(axis=0).tolist() for i, scale in enumerate(cfg.scales)
        },
        "judge_figures": judge_figures(cfg.first_seed, 100, cfg.candidates, cfg.judge),
        "first_answer_share": {k: float(np.mean(v)) for k, v in stats.items()},
        "rows": [r for r in rows if r["design"] != LIMIT],
        "judge_limit": [r for r in rows if r["design"] == LIMIT],
        "seconds": round(time.monotonic() - t0, 1),
        "cpu_seconds": round(time.process_time() - c0, 1),
    }
