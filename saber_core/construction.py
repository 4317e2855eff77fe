"""How a benchmark is constructed, step by step: one named option per step, two presets.

``method: sabermath`` is the published construction (nygeorgiev/sabermath @ 9f015a7,
``build_benchmark/``; ``docs/sabermath.md``), ``method: platform`` this platform's first variant.
A preset fills every step the user did not set; every resolved value is recorded in the stage
fingerprints and the build report.

=====================  ========================  =========================  ===================
step                   option                    sabermath (published)      platform
=====================  ========================  =========================  ===================
ontology               ``ontology_source``       ``tag_paths``: the path    ``node_file``: the
                                                 tree of the corpus' tags   DAG of a node file
tag clean-up           ``tag_cleanup``           ``published``: ancestors   ``dedupe``
                                                 removed (next tag only)
information content    ``ic``                    ``corpus_frequency``       ``seco`` (intrinsic)
topic similarity       ``bma``                   ``pooled``                 ``mean_of_means``
summary tokens         ``tokenizer``             ``sabermath`` (ASCII,      ``platform`` (NFKC,
                                                 sklearn + 30 math stop     own stop list,
                                                 words, ∅∅ → 1)             ∅∅ → 0)
score precision        ``precision``             ``float16``                ``float32``
thresholds             ``thresholds``            ``global_percentile`` (q   ``quantile`` (per
                                                 over all ordered pairs)    query; or ``absolute``)
targets                ``targets``               ``eligible_rows`` (every   ``sampled_queries``
                                                 row whose groups fill)     (balanced first)
choice in a group      ``group_choice``          ``random_sample``          ``top_score``
near-duplicates        ``near_duplicates``       ``keep``                   ``exclude``
domains                ``domains``               ``multi_label`` + quotas   ``single``
pairing                ``pairing``               ``published_swiss``        ``swiss`` (or
                                                                            ``information``,
                                                                            ``adaptive``)
Bradley–Terry fit      ``bt``                    ``sklearn_lbfgs``          ``exact``
=====================  ========================  =========================  ===================

This is the one table of the presets and the one vocabulary: ``thresholds``, ``pairing`` and
``bt`` take the values of the build config's ``thresholds.mode``, ``tournament.pairing`` and
``rating.fit``, which are their homes (:data:`DERIVED_STEPS`).

The published defects have opt-in fixes (``fixes``; :data:`saber_core.published.FIXES`);
a fix applies to the published variant of its step.

Two discovery engines carry the steps: ``all_pairs`` (``thresholds: global_percentile`` with
``targets: eligible_rows``: every ordered pair of the corpus is scored) and ``per_query``
(``quantile`` or ``absolute`` with ``sampled_queries``: queries first, then a query × corpus
matrix). Each supports the step variants of :data:`SUPPORTED`; :meth:`Construction.validate`
names the conflicting options of anything else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from saber_core.published import FIXES, THRESHOLD_QUANTILE, parse_fixes

STEPS = (
    "ontology_source",
    "tag_cleanup",
    "ic",
    "bma",
    "tokenizer",
    "precision",
    "thresholds",
    "targets",
    "group_choice",
    "near_duplicates",
    "domains",
    "pairing",
    "bt",
)
METHODS = ("sabermath", "platform")  # the presets: the columns of CHOICES
CHOICES: dict[str, tuple[str, str]] = {  # step → its option under each of METHODS
    "ontology_source": ("tag_paths", "node_file"),
    "tag_cleanup": ("published", "dedupe"),
    "ic": ("corpus_frequency", "seco"),
    "bma": ("pooled", "mean_of_means"),
    "tokenizer": ("sabermath", "platform"),
    "precision": ("float16", "float32"),
    "thresholds": ("global_percentile", "quantile"),
    "targets": ("eligible_rows", "sampled_queries"),
    "group_choice": ("random_sample", "top_score"),
    "near_duplicates": ("keep", "exclude"),
    "domains": ("multi_label", "single"),
    "pairing": ("published_swiss", "swiss"),
    "bt": ("sklearn_lbfgs", "exact"),
}
OTHER_CHOICES = {  # options no preset picks
    "thresholds": ("absolute",),
    "pairing": ("information", "adaptive"),
}
GLOBAL_THRESHOLDS = "global_percentile"  # the one mode of the all_pairs engine
# Steps whose option has its home in another section of the build config: the threshold mode
# (``thresholds``, ``targets``: the discovery engine), the pairing and the Bradley–Terry fit
# (``bt``). The others are set as steps.
DERIVED_STEPS = ("thresholds", "targets", "pairing", "bt")
OPTION_STEPS = tuple(step for step in STEPS if step not in DERIVED_STEPS)
# Step variants each discovery engine implements (tournament steps work with both).
SUPPORTED: dict[str, dict[str, tuple[str, ...]]] = {
    "all_pairs": {
        "ontology_source": ("tag_paths", "node_file"),
        "tag_cleanup": ("published", "dedupe"),
        "ic": ("corpus_frequency", "seco"),
        "bma": ("pooled", "mean_of_means"),
        "tokenizer": ("sabermath", "platform"),
        "precision": ("float16",),
        "group_choice": ("random_sample", "top_score"),
        "near_duplicates": ("keep",),
        "domains": ("multi_label", "single"),
    },
    "per_query": {
        "ontology_source": ("node_file", "tag_paths"),
        "tag_cleanup": ("dedupe", "published"),
        "ic": ("seco",),
        "bma": ("mean_of_means",),
        "tokenizer": ("platform",),
        "precision": ("float32",),
        "group_choice": ("top_score",),
        "near_duplicates": ("exclude", "keep"),
        "domains": ("single",),
    },
}
# The step each published-defect fix changes, and the variant it needs (a fix applies to the
# published variant of its step; the Lin diagonal exists in the all_pairs engine only).
FIX_NEEDS = {
    "ancestor_check": ("tag_cleanup", "published"),
    "root_self_similarity": ("targets", "eligible_rows"),
    "empty_idea_jaccard": ("tokenizer", "sabermath"),
    "sit_outs": ("pairing", "published_swiss"),
    "presentation": ("pairing", "published_swiss"),
    "bt_exact": ("bt", "sklearn_lbfgs"),
}


@dataclass(frozen=True)
class Construction:
    """Every step's resolved option, the fixes and the threshold quantile (module docstring)."""

    method: str
    ontology_source: str
    tag_cleanup: str
    ic: str
    bma: str
    tokenizer: str
    precision: str
    thresholds: str
    targets: str
    group_choice: str
    near_duplicates: str
    domains: str
    pairing: str
    bt: str
    fixes: tuple[str, ...] = ()
    threshold_quantile: float = THRESHOLD_QUANTILE

    @property
    def engine(self) -> str:
        """``all_pairs`` or ``per_query`` (the discovery engine the thresholds/targets name)."""
        return "all_pairs" if self.targets == "eligible_rows" else "per_query"

    def has_fix(self, fix: str) -> bool:
        """Whether the published-defect fix ``fix`` is on."""
        return fix in self.fixes

    def validate(self) -> Construction:
        """ValueError naming the options that no engine combines; returns ``self``."""
        for step in STEPS:
            value = getattr(self, step)
            allowed = choices(step)
            if value not in allowed:
                raise ValueError(f"construction: {step}={value!r}; choose one of {allowed}")
        if (self.thresholds == GLOBAL_THRESHOLDS) != (self.targets == "eligible_rows"):
            raise ValueError(
                f"construction: thresholds={self.thresholds!r} with targets={self.targets!r}: "
                f"use {GLOBAL_THRESHOLDS} with eligible_rows (every ordered pair scored), the "
                "per-query thresholds with sampled_queries"
            )
        for step, allowed in SUPPORTED[self.engine].items():
            if getattr(self, step) not in allowed:
                raise ValueError(
                    f"construction: {step}={getattr(self, step)!r} is not available with "
                    f"targets={self.targets!r} (the {self.engine} engine supports {allowed})"
                )
        for fix in self.fixes:
            step, needed = FIX_NEEDS[fix]
            if getattr(self, step) != needed:
                raise ValueError(
                    f"construction: fix {fix!r} changes the published variant; it needs "
                    f"{step}={needed!r}, not {getattr(self, step)!r}"
                )
        if not 0.0 < self.threshold_quantile < 1.0:
            raise ValueError("construction: threshold_quantile must be in (0, 1)")
        return self

    def as_provenance(self) -> dict[str, object]:
        """Every field, JSON-ready."""
        values = asdict(self)
        values["fixes"] = list(self.fixes)
        return values


def choices(step: str) -> tuple[str, ...]:
    """Every option of ``step``: the presets' first, in the order of :data:`METHODS`."""
    return (*dict.fromkeys(CHOICES[step]), *OTHER_CHOICES.get(step, ()))


def preset(method: str) -> Construction:
    """The construction of a preset: ``sabermath`` (published) or ``platform``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    column = METHODS.index(method)
    return Construction(method=method, **{step: CHOICES[step][column] for step in STEPS})


def resolve(
    method: str,
    fixes: str | list[str] | tuple[str, ...] = (),
    threshold_quantile: float = THRESHOLD_QUANTILE,
    **steps: str | None,
) -> Construction:
    """The preset of ``method`` with the explicitly set ``steps`` (None = the preset's), the
    fixes (validated against :data:`FIXES`) and the threshold quantile; validated."""
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise ValueError(f"construction: unknown step(s) {sorted(unknown)}; steps: {STEPS}")
    chosen = {k: v for k, v in steps.items() if v is not None}
    base = preset(method)
    built = replace(base, **chosen, fixes=parse_fixes(fixes), threshold_quantile=threshold_quantile)
    return built.validate()


__all__ = [
    "CHOICES",
    "DERIVED_STEPS",
    "FIXES",
    "FIX_NEEDS",
    "GLOBAL_THRESHOLDS",
    "METHODS",
    "OPTION_STEPS",
    "OTHER_CHOICES",
    "STEPS",
    "SUPPORTED",
    "Construction",
    "choices",
    "preset",
    "resolve",
]
