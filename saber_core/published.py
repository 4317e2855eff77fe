"""The published SABER-Math constants and the opt-in fixes of its published defects.

The published variant of every construction step (``*_published`` modules, the all-pairs
engine, :mod:`saber_core.ontology.tag_paths`) reproduces the authors' code
(nygeorgiev/sabermath @ 9f015a7, ``build_benchmark/``; ``docs/sabermath.md``) by default. Each
published defect has a named fix a caller opts into (section numbers of ``docs/sabermath.md``):

==========================  ===  ==============================================================
fix                         §    published behaviour → fixed behaviour
==========================  ===  ==============================================================
``ancestor_check``          2    only the immediate successor in sorted order is checked, so an
                                 ancestor survives behind a sibling ``X-Y`` → every tag that is a
                                 proper path-prefix of another tag is dropped
``root_self_similarity``    4    Lin(n, n) = 2IC/(2IC + 1e-12), 0 for the root → 1.0
``empty_idea_jaccard``      6    J(∅, ∅) = 1.0 → 0.0
``sit_outs``                10   candidates the greedy leaves without partner sit out → placed by
                                 the swap repair of :func:`saber_core.tournament.swiss.repair_round`
``presentation``            10   the lexicographically smaller id is always Sample 1 → a seeded
                                 random order per pair
``bt_exact``                11   scikit-learn's lbfgs stopped at tol 1e-4 → the exact penalized
                                 optimum (:func:`saber_core.rating.bradley_terry.fit_bradley_terry`)
==========================  ===  ==============================================================
"""

from __future__ import annotations

from collections.abc import Iterable

FIXES: tuple[str, ...] = (
    "ancestor_check",
    "root_self_similarity",
    "empty_idea_jaccard",
    "sit_outs",
    "presentation",
    "bt_exact",
)

PER_GROUP_COUNT = 50  # §8 --per-group-count
THRESHOLD_QUANTILE = 0.99  # §7 --percentile
ZOOM_ROUNDS = 4  # §7 --rounds
ZOOM_BINS = 1024  # §7 bucket_count
SWISS_ROUNDS = 20  # §10 config.yaml num_rounds
SWISS_WINDOW = 150  # §10 next_pairs: only the first 150 positions pair (hard-coded)
SWISS_BATCH = 200  # §10 driver: targets are played 200 at a time, all rounds per batch
SWISS_SEED = 42  # §10 random.seed(42), an import side effect of llmteach/postprocess.py
FINAL_SAMPLER_SEED = 0  # §9 README --seed 0
SELECTION_SEED = 0  # §8 published: np.random.default_rng() without a seed; ours is recorded

# §7 published thresholds (q = 0.99 over all ordered pairs of the databank).
PUBLISHED_BMA_THRESHOLD = 1757 / 2048 + 2**-41  # 0.8579101562504547
PUBLISHED_JACCARD_THRESHOLD = 1725 / 8192 + 2**-41  # 0.21057128906295475

GROUPS = ("topic_only", "summary_only", "both")  # §8 pool groups: codes 0, 1, 2, in pool order

# §9 select/utils.py TAG_TO_DOMAIN: first level below the root → domain; others have none.
DOMAIN_MAP: tuple[tuple[str, str], ...] = (
    ("NumberTheory", "Number Theory"),
    ("Geometry", "Geometry"),
    ("Algebra", "Algebra"),
    ("CalculusandAnalysis", "Calculus and Analysis"),
    ("DiscreteMathematics", "Combinatorics"),
    ("ProbabilityandStatistics", "Combinatorics"),
    ("RecreationalMathematics", "Combinatorics"),
)

# §9 final_sampler.py DOMAIN_DISTRIBUTION, in its sampling order: sorted domain tuple → quota.
DOMAIN_QUOTAS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("Algebra",), 150),
    (("Geometry",), 195),
    (("Number Theory",), 150),
    (("Calculus and Analysis",), 199),
    (("Combinatorics",), 150),
    (("Combinatorics", "Number Theory"), 50),
    (("Algebra", "Combinatorics"), 50),
    (("Algebra", "Number Theory"), 50),
    (("Algebra", "Geometry"), 3),
    (("Combinatorics", "Geometry"), 2),
    (("Algebra", "Calculus and Analysis"), 1),
)


def parse_fixes(fixes: str | Iterable[str]) -> tuple[str, ...]:
    """Fix names (an iterable, or one comma-separated string) → a tuple in :data:`FIXES` order.

    Blanks and repeats are ignored; an unknown name raises ValueError listing the known ones.
    """
    names = fixes.split(",") if isinstance(fixes, str) else list(fixes)
    wanted = {name.strip() for name in names if name.strip()}
    unknown = sorted(wanted.difference(FIXES))
    if unknown:
        raise ValueError(f"unknown fix(es) {unknown}; the known fixes are {list(FIXES)}")
    return tuple(name for name in FIXES if name in wanted)
