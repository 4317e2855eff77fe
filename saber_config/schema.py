"""The build configuration a user writes: plain, frozen, validated data (pydantic models, no
Dagster type) holding every option of a build, nested by concern, each option in exactly one
place. The Dagster resource and config classes are generated from it at the asset edge
(:mod:`saber_assets.resources`).

Sections: ``inputs``, ``annotation``, ``llm``, ``pools`` (queries and pool sizes),
``thresholds`` (both discovery engines), ``construction`` (the published construction's steps
and fixes), ``tournament`` (judge, pairing, presentation, rounds), ``rating`` (the
Bradley–Terry fit and the label scale), ``slurm``, ``allpairs``, ``validity``, ``automation``.
An empty value (``""`` or ``None``) means "the preset of ``method``" (:mod:`.plan` resolves it).
Profiles, ``SABER_<NAME>`` variables and legacy names: :mod:`.loading`. What a build runs is the
resolved :class:`~saber_config.plan.BuildPlan`, never these raw values.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import pydantic

from saber_core.construction import METHODS, OPTION_STEPS, choices
from saber_store.paths import SaberPaths

if TYPE_CHECKING:
    from saber_config.plan import BuildPlan
    from saber_config.reads import PlanReads


class Section(pydantic.BaseModel):
    """A section of the configuration (and the whole of it): frozen, validated fields."""

    model_config = pydantic.ConfigDict(
        frozen=True, arbitrary_types_allowed=True, ignored_types=(cached_property,)
    )


@dataclass(frozen=True)
class Registered:
    """A setting naming a class of a table of :mod:`saber_llm.factory` (``BACKENDS``,
    ``JUDGES``), checked against the table when a config is validated (a class registered after
    import is a valid name: docs/extending.md)."""

    table: str

    def names(self) -> list[str]:
        """The table's names, sorted."""
        from saber_llm import factory  # at validation time: the tables import the LLM code

        return sorted(getattr(factory, self.table))

    def __call__(self, name: str) -> str:
        """``name`` if registered, else ``ValueError`` naming the registered ones."""
        if name not in self.names():
            raise ValueError(f"unknown name {name!r}; known: {', '.join(self.names())}")
        return name


BackendName = Annotated[str, pydantic.AfterValidator(Registered("BACKENDS"))]
JudgeName = Annotated[str, pydantic.AfterValidator(Registered("JUDGES"))]

# The words of the presets' table (saber_core.construction), "" = the method's preset
Method = Literal[METHODS]  # type: ignore[valid-type]
ThresholdMode = Literal[("", *choices("thresholds"))]  # type: ignore[valid-type]
Pairing = Literal[("", *choices("pairing"))]  # type: ignore[valid-type]
RatingFit = Literal[("", *choices("bt"))]  # type: ignore[valid-type]


class InputSettings(Section):
    """Where the corpus, the ontology and the prompts come from, and how rows are validated."""

    corpus: str = "champ"  # champ (the packaged CHAMP set), synthetic, or a .parquet/.jsonl file
    ontology: str = "champ"  # champ, synthetic, or a node file (.csv/.json/.jsonl/.parquet)
    synth_scale: float = 1.0  # size of the synthetic corpus (1.0 = 283K documents)
    corpus_limit: int = 0  # keep a seeded, domain-balanced sample of this many rows (0 = all)
    max_text_chars: int = 100_000  # longer problems or solutions are quarantined
    prompts_dir: str = ""  # folder of the prompt files ("" = the project's prompts/)


class AnnotationSettings(Section):
    """Summaries and topics: from the corpus (human-written) or written by the LLM."""

    summaries: Literal["corpus", "llm"] = "corpus"  # the corpus' summary column, or LLM-written
    topics: Literal["corpus", "llm"] = "corpus"  # the corpus' topics column, or LLM-chosen
    summary_max_tokens: int = 96  # token budget of one LLM summary
    topics_max_tokens: int = 48  # token budget of one LLM topic answer
    topic_shortlist: int = 12  # ontology nodes offered to the LLM per document (MiniLM nearest)
    max_topics: int = 5  # topics kept per document from an LLM answer


class LLMSettings(Section):
    """The LLM backend behind every LLM stage (``SABER_LLM_<FIELD>``)."""

    backend: BackendName = "embedded"  # the engine behind LLM stages
    model: str = ""  # model id or folder (vllm, openai; the embedded backend has its own)
    base_url: str = ""  # API root of an OpenAI-compatible server (openai)
    tensor_parallel: int = 1  # GPUs per model (vllm)
    reasoning_effort: str = ""  # low / medium / high for reasoning models ("" = not sent)
    max_concurrency: int = 16  # requests in flight (openai)
    max_model_len: int = 0  # vllm context length (0: the model's; 2048 for the packaged model)


class PoolSettings(Section):
    """Queries and candidate pools: how many queries, group sizes, near-duplicates, fallback."""

    n_queries: int = 30  # queries drawn (per-query engine; all-pairs: domain_quotas decide)
    query_draw: Literal["shuffle", "stable"] = "shuffle"  # stable: survives appended documents
    n_topic_only: int = 50  # candidates per pool with high topic and low summary similarity
    n_summary_only: int = 50  # candidates with high summary and low topic similarity
    n_both: int = 50  # candidates high on both
    near_duplicate_cut: float = 0.8  # problem-text Jaccard from which a document is a duplicate
    fallback: Literal["relax", "skip"] = "relax"  # a group that cannot fill: relax or skip
    neighbours_kept: int = 50  # nearest documents per query kept in the similarity tables


class ThresholdSettings(Section):
    """What "high" and "low" mean for both signals, for both discovery engines.

    ``mode``: ``global_percentile`` (one threshold per signal over all ordered pairs at
    ``quantile``: the all-pairs engine, published), ``quantile`` or ``absolute`` (per query, the
    per-query engine: ``*_high``/``*_low`` are quantiles of the query's eligible scores, or
    values); "" = the method's preset.
    """

    mode: ThresholdMode = ""  # see above
    quantile: float = 0.99  # the global percentile over all ordered pairs (global_percentile)
    topic_high: float = 0.9  # high topic similarity from here (quantile or value)
    topic_low: float = 0.5  # low topic similarity up to here (quantile or value)
    summary_high: float = 0.9  # high summary similarity from here (quantile or value)
    summary_low: float = 0.5  # low summary similarity up to here (quantile or value)


def _described(factory: type, text: str) -> typing.Any:
    return pydantic.Field(default_factory=factory, description=text)


def _construction_section() -> type[Section]:
    """``ConstructionSettings``: one optional field per construction step set as a step
    (:data:`saber_core.construction.OPTION_STEPS`; None = the method preset's choice, checked
    against :func:`~saber_core.construction.choices`), the fixes, the domain quotas and map,
    and the defect audit."""
    steps = {
        step: (str | None, pydantic.Field(default=None, description=" | ".join(choices(step))))
        for step in OPTION_STEPS
    }
    section = pydantic.create_model(
        "ConstructionSettings",
        __base__=Section,
        __doc__="The construction step by step (None = the preset of ``method``), the "
        "published-defect fixes, the domain quotas and tag → domain map, and the defect audit.",
        **steps,
        fixes=(list[str], _described(list, "published-defect fixes (docs/sabermath.md)")),
        domain_quotas=(
            dict[str, int],
            _described(
                dict, 'queries per domain set, e.g. {"Algebra|Geometry": 2} ({}: published)'
            ),
        ),
        domain_map=(dict[str, str], _described(dict, "first tag level → domain ({}: published)")),
        audit_fixes=(
            list[str],
            pydantic.Field(
                default_factory=lambda: ["all"], description="fixes the audit replays (all)"
            ),
        ),
        audit_queries=(int, pydantic.Field(0, description="queries the audit replays (0: all)")),
    )
    section.__module__ = __name__
    return section


ConstructionSettings = _construction_section()


class TournamentSettings(Section):
    """The pairwise judge, the pairing, the presentation order and the number of rounds.

    ``pairing``: ``swiss`` (platform: repair swaps, no sit-outs), ``published_swiss`` (the
    published rules), ``information`` or ``adaptive``; "" = the method's preset.
    ``presentation``: ``pool_order`` (one call, smaller position first — the smaller id under
    ``published_swiss``), ``both_orders`` (two calls, averaged; LLM judge only) or
    ``seeded_random`` (one call, seeded random order per pair); "" = both orders for the LLM judge
    of a platform pairing, else pool order. ``seed``: None = the seed policy (42 under
    ``published_swiss``, as published; else the build's ``seed``). ``adaptive_*``: the top-focused
    tournament (``rounds`` is then its most rounds). ``pointwise_judge``: a retriever spec of the
    registry (``st:minilm``, ``seqcls:…``, ``yesno:<profile>``; ``yesno:build``: the build's own
    LLM) whose scores grade every pool candidate (asset ``pointwise_grades``). ``triage``:
    ``band`` or ``calibrated`` sends to the pairwise judge only the pairs the grades do not
    decide confidently (docs/validity.md "Triage in the build"; needs ``pointwise_judge``).
    """

    judge: JudgeName = "embedding"  # MiniLM, token overlap or LLM
    judge_mode: Literal["choice", "generate"] = "choice"  # constrained choice or free reasoning
    judge_max_tokens: int = 4096  # token budget of one generated verdict
    presentation: Literal["", "pool_order", "both_orders", "seeded_random"] = ""  # see above
    rounds: int = 8  # rounds per query (adaptive: at most)
    pairing: Pairing = ""  # see above
    seed: int | None = None  # the tournament's seed (None: the seed policy above)
    adaptive_warmup: int = 4  # Swiss rounds before adaptive pairing starts
    adaptive_stop_ndcg: float = 0.9  # a query stops at this posterior nDCG@10
    adaptive_min_weight: float = 0.02  # pairs below this weight are not played
    adaptive_draws: int = 200  # posterior draws per round
    pointwise_judge: str = ""  # retriever spec grading every pool candidate ('' = none)
    triage: Literal["off", "band", "calibrated"] = "off"  # pairs the grades decide skip the judge
    triage_low: float = 0.5  # band rule: a grade below this is confidently irrelevant
    triage_high: float = 1.5  # band rule: a grade at or above this is confidently relevant
    triage_threshold: float = 0.4  # calibrated rule: decided when |p − ½| ≥ this


class RatingSettings(Section):
    """Ratings from the judgments: the Bradley–Terry fit and its outcomes.

    ``fit``: ``exact`` (the penalized optimum) or ``sklearn_lbfgs`` (the published scikit-learn
    fit, stopped early); "" = the method's preset. ``soft``: fit the judge's probabilities instead
    of hard wins (also the information and adaptive pairings' refit). ``c``: the L2 strength C,
    or ``auto``: the C that ``saber study budget --choose-c`` chose for the probed judge, read
    from ``c_file`` (docs/budget-study.md "Choosing C").
    ``label_scale``: how strengths become 0–5 labels (``saber_core.rating.scales``): ``minmax``
    per query (published), robust ``quantile`` anchors, a noise-corrected ``zscore``, its
    ``posterior_gain``, a ``logit`` map shared by every query, or ``anchored`` on each query's
    10th strongest candidate (the nDCG@10 boundary); docs/budget-study.md compares them.
    ``style_control``: fit style features as Bradley–Terry covariates jointly with the strengths
    and rate by the style-free strengths (docs/validity.md "Style"; needs the ``exact`` fit).
    """

    fit: RatingFit = ""  # see above
    soft: bool = False  # fit the judge's probabilities, not hard wins
    c: typing.Any = 1.0  # L2 strength C of the fit (scikit-learn's C), or auto (see above)
    c_file: str = ""  # c: auto's chosen_c.json ("": <home>/study/budget/chosen_c.json)
    label_scale: Literal["minmax", "quantile", "zscore", "posterior_gain", "logit", "anchored"] = (
        "minmax"  # strengths → 0–5 labels (saber_core.rating.scales; minmax: the published one)
    )
    style_control: bool = False  # rate by style-free strengths (style features as BT covariates)

    @pydantic.field_validator("c", mode="before")
    @classmethod
    def _number_or_auto(cls, value: typing.Any) -> float | str:
        """A float or ``auto`` (Dagster's config types have no float-or-literal union)."""
        return value if value == "auto" else float(value)


class SlurmSettings(Section):
    """Cluster profile and per-build overrides (``SABER_SLURM_<FIELD>``; "" or < 0 = profile's).

    ``mode``: ``allocation`` (one LLM-server allocation per model and run, fed stage by stage)
    or ``per_shard`` (one job per shard); "" keeps the cluster profile's (default allocation).
    ``orphan_poll_seconds``: how often the orphan sensor looks at the cluster.
    """

    profile: str = "dev"  # cluster profile: slurm/profiles/<name>.yaml or a YAML path
    mode: Literal["", "allocation", "per_shard"] = ""  # see above
    orphan_poll_seconds: int = 120  # how often the orphan sensor looks at the cluster
    shard_size: int = 0  # requests per shard (0: the cluster profile's)
    max_retries: int = -1  # resubmissions of a failed job or shard (-1: the profile's)
    partition: str = ""  # SLURM partition ("": the profile's)
    account: str = ""  # SLURM account ("": the profile's)
    time_limit: str = ""  # walltime of a job, e.g. 04:00:00 ("": the profile's)
    gpus_per_node: int = -1  # GPUs per LLM job (-1: the profile's)


class AllPairsSettings(Section):
    """All-pairs discovery (``thresholds.mode: global_percentile``): how its passes are cut and
    where they run. None of these changes a result (units add up exactly)."""

    workers: int = 0  # threads on this machine (0: every core)
    units: int = 0  # row ranges per pass, each committed when done (0: ~100M pairs each)
    shards: int = 4  # SLURM CPU jobs per pass under execution: slurm
    shard_cpus: int = 2  # CPUs (threads) of each shard job
    shard_partition: str = ""  # SLURM partition of the shard jobs ("": the SLURM profile's)
    shard_mem: str = ""  # --mem of each shard job ("": the SLURM profile's)
    shard_time: str = ""  # --time of each shard job ("": the SLURM profile's time_limit)
    checkpoint_seconds: float = 60.0  # each thread saves its finished units at most this often


class ValiditySettings(Section):
    """Rating intervals, round-robin sample, contamination gate and recipe sensitivity."""

    bootstrap: int = 200  # bootstrap resamples of the rating intervals
    rr_queries: int = 3  # queries judged as a full round robin (validity report)
    contamination_corpus: str = ""  # a training corpus to check queries against ("": none)
    contam_ngram: int = 8  # word n-gram length of the containment check
    contam_threshold: float = 0.35  # containment (either direction) that flags a text
    recipe_summaries: str = "auto"  # auto | none | a {doc_id, summary} JSONL/parquet file
    recipe_queries: int = 0  # queries in the other-recipe tournament (seeded sample; 0 = all)


class AutomationSettings(Section):
    """Scheduled rebuilds and the input-change sensor."""

    rebuild_cron: str = ""  # a cron schedule for rebuilds, e.g. "0 3 * * 1" ("": none)
    watch_inputs: bool = False  # rebuild when an input file or prompt changes
    watch_interval_seconds: int = 60  # how often the input sensor looks


class BuildConfig(Section):
    """Every setting of a build as the user wrote it; :meth:`plan` is what the build runs."""

    profile: str = "default"  # the profile the settings came from
    home: str = ".saber"  # the SABER home: database, artifacts, caches, export
    embedding_cache: str = ""  # a file homes may share ("": <home>/cache/eval_cache.duckdb)
    seed: int = 0  # the build's seed: every random step derives from it (seed policy)
    method: Method = "platform"  # the preset of every empty setting
    execution: Literal["local", "slurm"] = "local"  # where LLM stages and all-pairs passes run
    inputs: InputSettings = InputSettings()
    annotation: AnnotationSettings = AnnotationSettings()
    llm: LLMSettings = LLMSettings()
    pools: PoolSettings = PoolSettings()
    thresholds: ThresholdSettings = ThresholdSettings()
    construction: ConstructionSettings = ConstructionSettings()  # type: ignore[valid-type]
    tournament: TournamentSettings = TournamentSettings()
    rating: RatingSettings = RatingSettings()
    slurm: SlurmSettings = SlurmSettings()
    allpairs: AllPairsSettings = AllPairsSettings()
    validity: ValiditySettings = ValiditySettings()
    automation: AutomationSettings = AutomationSettings()
    explicit: dict[str, str] = pydantic.Field(
        default_factory=dict,
        description="Dotted name → origin (profile, environment variable, override) of every "
        "setting the user set (filled by load_build_config; presets never override them, and "
        "two of them that disagree are an error).",
    )

    @cached_property
    def resolved(self) -> BuildPlan:
        """The resolved, validated plan (:func:`saber_config.plan.resolve_plan`)."""
        from saber_config.plan import resolve_plan

        return resolve_plan(self)

    def plan(self) -> BuildPlan:
        """The resolved, validated plan of this build."""
        return self.resolved

    def reads(self) -> PlanReads:
        """A fresh recording view of the plan (what a stage reads is its fingerprint)."""
        from saber_config.reads import PlanReads

        return PlanReads(self.resolved)

    @property
    def paths(self) -> SaberPaths:
        """The files under this build's SABER home."""
        return SaberPaths.at(self.home, self.embedding_cache)

    @property
    def home_path(self) -> Path:
        """The SABER home folder (database, artifacts, export)."""
        return self.paths.home

    @property
    def database_path(self) -> Path:
        """The build's DuckDB file."""
        return self.paths.database

    @property
    def export_dir(self) -> Path:
        """Where ``benchmark_export`` writes."""
        return self.paths.export_dir

    @property
    def artifacts_dir(self) -> Path:
        """Where score matrices and plots are kept."""
        return self.paths.artifacts_dir

    @property
    def eval_cache_path(self) -> Path:
        """The embedding cache (judge, recipe stage and ``saber_eval`` share it)."""
        return self.paths.embedding_cache


# Where a build's files live, not what the build is: never recorded as given, in a manifest or in a
# fingerprint (a home moved, or a cache shared, is still the same build).
LOCATIONS = ("home", "embedding_cache")

SECTIONS: dict[str, type[Section]] = {
    name: info.annotation
    for name, info in BuildConfig.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, Section)
}
