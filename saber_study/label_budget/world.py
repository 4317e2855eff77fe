"""The simulated world of the label-budget study: queries, a realistic pairwise judge, a cheap
pointwise grader and 20 retrievers (``saber study budget``; docs/budget-study.md).

Every random draw of query ``q`` (a global index) comes from ``default_rng([seed, stream, q])``
or from a counter hash of ``(seed, stream, q, pair, call)``, so every design of a seed sees the
same queries, strengths, pair noise, retriever scores and — for the k-th call of a pair — the
same call noise and presentation flip (common random numbers), whatever the chunking.

Strengths ``s`` (latent relevance on the judge's logit scale), by shape (query ``q`` has shape
``SHAPES[q mod 3]``):

* ``gaussian``: ``s_i ~ N(0, 1.5²)``;
* ``few_relevant``: ``k ~ U{2, …, 10}`` relevant candidates ``s ~ N(3, 0.8²)``, the rest
  ``N(0, 0.8²)``;
* ``heavy_ties``: five levels ``{−3, −1.5, 0, 1.5, 3}`` with probabilities
  ``(0.3, 0.3, 0.2, 0.12, 0.08)`` plus ``N(0, 0.05²)`` jitter (near-ties everywhere).

The judge, shown ``(f, g)`` (``f`` first) for the k-th time, answers "f" iff::

    (s_f + δ_f) − (s_g + δ_g) + η_fg + γ (u_f × u_g) + τ ε_k + β₀ exp(−|s_f − s_g| / w) > 0

with ``δ_i ~ N(0, item_bias²)`` the judge's own taste for a candidate (0 by default; no number of
calls removes it, and a retriever built like the judge shares it), ``η_fg = −η_gf`` drawn from
``N(0, pair_noise²)`` and fixed per pair (what a judge gets wrong about a pair every time),
``ε_k`` standard logistic per call (antisymmetric: the same call noise whichever is shown first),
``u_i ~ N(0, I₂)`` and ``u_f × u_g = u_f1 u_g2 − u_f2 u_g1`` a mild rock–paper–scissors
(intransitive) term, and a position bias for the first answer that peaks at ``β₀`` for equal
candidates and fades with the gap (real judges show it most on close pairs).

Pointwise grader (one call per candidate): ``grade_i = #{k : s_i + o_q + σ_pw ε_i > t_k}``,
thresholds ``t = (−0.5, 0.8, 1.8, 2.8)`` (grades 0–4), a per-query offset ``o_q ~ N(0, 0.5²)``
and ``ε_i ~ Logistic(0, 1)``.

Retrievers ``r = 0 … 18``: ``score = s + σ_r (√ρ F_{r mod 4} + √(1 − ρ) e_r)`` with family
noise ``F`` shared by the retrievers of a family (correlated errors) and own noise ``e_r``, all
``N(0, 1)`` per candidate; ``σ_r`` spaced like a real leaderboard (some near-ties). Retriever 19
is built like the judge: it scores each candidate by the judge's own round-robin view,
``v_i + σ_J e`` with ``v_i = s_i + δ_i + mean_g (η_ig + γ u_i × u_g)`` (the strengths a judge
would report after every pair, infinitely often: ``Queries.view``), so it shares the
judge's errors. The anchored
scale's reference candidate is the ``reference_rank``-th candidate of retriever 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHAPES = ("gaussian", "few_relevant", "heavy_ties")
TIE_LEVELS = np.array([-3.0, -1.5, 0.0, 1.5, 3.0])
TIE_PROBS = np.array([0.3, 0.3, 0.2, 0.12, 0.08])
GRADE_THRESHOLDS = np.array([-0.5, 0.8, 1.8, 2.8])
RETRIEVER_NOISE = (
    1.1, 1.2, 1.25, 1.4, 1.55, 1.6, 1.8, 2.0, 2.2, 2.3,
    2.6, 2.9, 3.2, 3.3, 3.8, 4.3, 5.0, 6.0, 7.5,
)  # fmt: skip
N_FAMILIES = 4
JUDGE_LIKE = len(RETRIEVER_NOISE)  # index of the retriever built like the judge

STRENGTH_STREAM, PAIR_STREAM, INTRANSITIVE_STREAM = 1, 2, 3
RETRIEVER_STREAM, POINTWISE_STREAM, CALL_STREAM, FLIP_STREAM = 4, 5, 6, 7
TASTE_STREAM = 11

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class JudgeModel:
    """The judge's noise and biases (module docstring)."""

    item_bias: float = 0.0
    pair_noise: float = 1.0
    call_noise: float = 0.7
    intransitivity: float = 0.3
    bias_peak: float = 1.0
    bias_width: float = 1.0
    pointwise_noise: float = 1.0
    pointwise_offset: float = 0.5
    judge_like_noise: float = 1.15
    family_share: float = 0.5
    reference_rank: int = 10


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (uint64, wrapping)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def hashed_uniform(seed: int, stream: int, *keys: np.ndarray) -> np.ndarray:
    """A uniform in (0, 1) per element, a hash of ``(seed, stream, *keys)`` (common random
    numbers: the same keys give the same number in every design)."""
    with np.errstate(over="ignore"):
        h = _mix(np.uint64(seed) * _GOLDEN + np.uint64(stream))
        for k in keys:
            h = _mix(h ^ (np.asarray(k).astype(np.uint64) + _GOLDEN))
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def _strengths(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if shape == "gaussian":
        return rng.normal(0.0, 1.5, n)
    if shape == "few_relevant":
        s = rng.normal(0.0, 0.8, n)
        k = int(rng.integers(2, 11))
        s[rng.choice(n, k, replace=False)] = rng.normal(3.0, 0.8, k)
        return s
    levels = rng.choice(len(TIE_LEVELS), n, p=TIE_PROBS)
    return TIE_LEVELS[levels] + rng.normal(0.0, 0.05, n)


@dataclass(frozen=True)
class Queries:
    """A chunk of simulated queries (Qc queries × n candidates)."""

    ids: np.ndarray  # (Qc,) global query indices
    shape: np.ndarray  # (Qc,) index into SHAPES
    strengths: np.ndarray  # (Qc, n)
    taste: np.ndarray  # (Qc, n) δ, the judge's per-candidate bias
    view: np.ndarray  # (Qc, n) the judge's infinite-call view v
    pair_noise: np.ndarray  # (Qc, n, n) η, antisymmetric, float32
    cross: np.ndarray  # (Qc, n, n) γ u_f × u_g, antisymmetric, float32
    grades: np.ndarray  # (Qc, n) pointwise grades 0–4
    scores: np.ndarray  # (R, Qc, n) retriever scores
    reference: np.ndarray  # (Qc,) the anchored scale's reference candidate
    seed: int
    model: JudgeModel

    @property
    def n(self) -> int:
        return self.strengths.shape[1]

    def fixed_perception(self, q: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``(s_a + δ_a) − (s_b + δ_b) + η_ab + γ u_a × u_b``: the judge's call-independent view
        of the pair (a, b)."""
        s = self.strengths + self.taste
        return s[q, a] - s[q, b] + self.pair_noise[q, a, b] + self.cross[q, a, b]

    def call(
        self, q: np.ndarray, a: np.ndarray, b: np.ndarray, k: np.ndarray, a_first: np.ndarray
    ) -> np.ndarray:
        """1.0 where ``a`` wins the k-th call of pair (a, b) (``a < b``), shown ``a`` first
        where ``a_first``; the judge of the module docstring."""
        m = self.model
        u = hashed_uniform(self.seed, CALL_STREAM, self.ids[q], a, b, k)
        gap = self.strengths[q, a] - self.strengths[q, b]
        bias = m.bias_peak * np.exp(-np.abs(gap) / m.bias_width)
        ell = self.fixed_perception(q, a, b) + m.call_noise * np.log(u / (1.0 - u))
        return (ell + np.where(a_first, bias, -bias) > 0).astype(np.float64)

    def flips(self, q: np.ndarray, a: np.ndarray, b: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Seeded random presentation: True where the k-th call of (a, b) shows ``b`` first."""
        return hashed_uniform(self.seed, FLIP_STREAM, self.ids[q], a, b, k) < 0.5


def simulate_queries(
    seed: int, ids: np.ndarray, n: int, model: JudgeModel, shapes: tuple[str, ...] = SHAPES
) -> Queries:
    """Draw the queries ``ids`` (module docstring)."""
    qc = len(ids)
    strengths = np.empty((qc, n))
    taste = np.empty((qc, n))
    view = np.empty((qc, n))
    eta = np.zeros((qc, n, n), dtype=np.float32)
    cross = np.zeros((qc, n, n), dtype=np.float32)
    grades = np.empty((qc, n), dtype=np.int64)
    n_ret = len(RETRIEVER_NOISE) + 1
    scores = np.empty((n_ret, qc, n))
    iu, ju = np.triu_indices(n, k=1)
    sigma = np.asarray(RETRIEVER_NOISE)
    rho = model.family_share
    for j, q in enumerate(ids):
        shape = int(q) % len(shapes)
        s = _strengths(shapes[shape], n, np.random.default_rng([seed, STRENGTH_STREAM, int(q)]))
        strengths[j] = s
        taste[j] = np.random.default_rng([seed, TASTE_STREAM, int(q)]).normal(
            0.0, model.item_bias, n
        )
        upper = np.random.default_rng([seed, PAIR_STREAM, int(q)]).normal(
            0.0, model.pair_noise, len(iu)
        )
        eta[j, iu, ju], eta[j, ju, iu] = upper, -upper
        u = np.random.default_rng([seed, INTRANSITIVE_STREAM, int(q)]).standard_normal((n, 2))
        cr = model.intransitivity * (u[:, None, 0] * u[None, :, 1] - u[:, None, 1] * u[None, :, 0])
        cross[j] = cr
        rng = np.random.default_rng([seed, RETRIEVER_STREAM, int(q)])
        family = rng.standard_normal((N_FAMILIES, n))
        own = rng.standard_normal((n_ret, n))
        fam = family[np.arange(len(sigma)) % N_FAMILIES]
        scores[:-1, j] = s + sigma[:, None] * (np.sqrt(rho) * fam + np.sqrt(1 - rho) * own[:-1])
        view[j] = s + taste[j] + (eta[j] + cr).mean(axis=1)
        scores[-1, j] = view[j] + model.judge_like_noise * own[-1]
        rng = np.random.default_rng([seed, POINTWISE_STREAM, int(q)])
        noisy = (
            s
            + rng.normal(0.0, model.pointwise_offset)
            + model.pointwise_noise * rng.logistic(0.0, 1.0, n)
        )
        grades[j] = (noisy[:, None] > GRADE_THRESHOLDS[None, :]).sum(axis=1)
    shape_idx = np.asarray(ids) % len(shapes)
    order = np.argsort(-scores[0], axis=1, kind="stable")
    reference = order[:, min(model.reference_rank, n) - 1]
    return Queries(
        ids=np.asarray(ids, dtype=np.int64),
        shape=shape_idx,
        strengths=strengths,
        taste=taste,
        view=view,
        pair_noise=eta,
        cross=cross,
        grades=grades,
        scores=scores,
        reference=reference,
        seed=seed,
        model=model,
    )


def judge_figures(seed: int, n_queries: int, n: int, model: JudgeModel) -> dict[str, float]:
    """The judge on random pairs of Gaussian queries (ids ``3 (10⁸ + j)``, apart from the
    study's): agreement with the true order, test–retest agreement of two calls in the same
    order, the share of first answers, and that share on close pairs (true gap < 0.3)."""
    world = simulate_queries(seed, 3 * (np.arange(n_queries) + 10**8), n, model)
    rng = np.random.default_rng([seed, 99])
    m = 200
    q = np.repeat(np.arange(n_queries), m)
    pick = rng.random((len(q), n)).argsort(axis=1)[:, :2]
    a, b = pick.min(axis=1), pick.max(axis=1)
    first = world.call(q, a, b, np.zeros(len(q), dtype=np.int64), np.ones(len(q), dtype=bool))
    again = world.call(q, a, b, np.ones(len(q), dtype=np.int64), np.ones(len(q), dtype=bool))
    gap = world.strengths[q, a] - world.strengths[q, b]
    close = np.abs(gap) < 0.3
    return {
        "accuracy_random_pairs": float(np.mean(first == (gap > 0))),
        "test_retest_agreement": float(np.mean(first == again)),
        "first_answer_share": float(first.mean()),
        "first_answer_share_close_pairs": float(first[close].mean()),
    }
