"""Build configuration: one resource holding every size, threshold and seed of a build, nested by
concern (inputs, annotation, llm, pools, tournament, slurm, validity, automation).

Profiles are YAML files in ``profiles/`` (``default``, ``paper``, ``tiny``, …), chosen by
``SABER_PROFILE`` (a profile name or a path to a YAML file). A profile may be nested
(``pools: {n_queries: 100}``) or flat (``n_queries: 100``). Every setting can be overridden by an
environment variable ``SABER_<NAME>`` where ``NAME`` is its flat name (:func:`flat_names`:
``SABER_N_QUERIES``, ``SABER_LLM_BACKEND``, ``SABER_SLURM_PARTITION``, ``SABER_POOL_FALLBACK``, …;
the names of the flat config of earlier releases, so users' scripts keep working). List and
mapping settings take JSON. The environment is read in :func:`load_build_config` only, never at
import time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import dagster as dg
import pydantic
import yaml

from saber_core.construction import CHOICES, Construction, resolve
from saber_core.discovery.pools import PoolConfig
from saber_core.published import DOMAIN_MAP, DOMAIN_QUOTAS
from saber_resources.store.paths import SaberPaths, profile_path


def config_section(core: type, name: str, doc: str, **extra: tuple[Any, Any]) -> type[dg.Config]:
    """A ``dg.Config`` class with the fields (types and defaults) of the core dataclass ``core``
    plus ``extra`` (``name=(type, default)``): the core dataclass stays the one declaration."""
    hints = typing.get_type_hints(core)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(core):
        kind = hints[f.name]
        if typing.get_origin(kind) is tuple:  # Dagster config has lists, not tuples
            kind = list[typing.get_args(kind)[0]]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        fields[f.name] = (kind, list(default) if isinstance(default, tuple) else default)
    fields.update(extra)
    section = pydantic.create_model(name, __base__=dg.Config, __doc__=doc, **fields)
    section.__module__ = __name__
    return section


class InputSettings(dg.Config):
    """Where the corpus and ontology come from and how their rows are validated."""

    corpus: str = "champ"
    ontology: str = "champ"
    synth_scale: float = 1.0
    corpus_limit: int = 0
    max_text_chars: int = 100_000


class AnnotationSettings(dg.Config):
    """Summaries and topics: from the corpus (human-written) or written by the LLM."""

    summaries: Literal["corpus", "llm"] = "corpus"
    topics: Literal["corpus", "llm"] = "corpus"
    summary_max_tokens: int = 96
    topics_max_tokens: int = 48
    topic_shortlist: int = 12
    max_topics: int = 5


class LLMSettings(dg.Config):
    """The LLM backend behind every LLM stage (``SABER_LLM_<FIELD>``)."""

    backend: Literal["embedded", "openai", "vllm"] = "embedded"
    model: str = ""
    base_url: str = ""
    tensor_parallel: int = 1
    reasoning_effort: str = ""
    max_concurrency: int = 16
    max_model_len: int = 0  # vLLM context length (0: the model's; 2048 for the packaged model)


PoolSettings = config_section(
    PoolConfig,
    "PoolSettings",
    "Queries and candidate pools: sizes, thresholds, near-duplicates, fallback.",
    n_queries=(int, 30),
    neighbours_kept=(int, 50),
)


def _step(step: str, doc: str):
    """An optional construction step (None = the method preset's choice; values checked by
    ``saber_core.construction.resolve``, one of ``CHOICES[step]``)."""
    return (str | None, pydantic.Field(default=None, description=f"{step}: {doc}"))


ConstructionSettings = pydantic.create_model(
    "ConstructionSettings",
    __base__=dg.Config,
    __doc__="The construction step by step (None = the preset of ``method``; see "
    "``saber_core.construction``), the published-defect fixes, the global threshold quantile, "
    "domain quotas and the tag → domain map.",
    ontology_source=_step("ontology_source", "tag_paths (path tree of the tags) | node_file"),
    tag_cleanup=_step("tag_cleanup", "published (ancestors removed) | dedupe"),
    ic=_step("ic", "corpus_frequency | seco"),
    bma=_step("bma", "pooled | mean_of_means"),
    tokenizer=_step("tokenizer", "sabermath | platform"),
    precision=_step("precision", "float16 | float32"),
    thresholds=_step("thresholds", "global_percentile | per_query"),
    targets=_step("targets", "eligible_rows | sampled_queries"),
    group_choice=_step("group_choice", "random_sample | top_score"),
    near_duplicates=_step("near_duplicates", "keep | exclude"),
    domains=_step("domains", "multi_label | single"),
    swiss=_step("swiss", "published | platform"),
    bt=_step("bt", "sklearn_lbfgs | exact"),
    sabermath_fixes=(list[str], pydantic.Field(default_factory=list)),
    threshold_quantile=(float, 0.99),
    swiss_seed=(int, 42),
    domain_quotas=(dict[str, int], pydantic.Field(default_factory=dict)),
    domain_map=(dict[str, str], pydantic.Field(default_factory=dict)),
    audit_fixes=(list[str], pydantic.Field(default_factory=lambda: ["all"])),
    audit_queries=(int, 0),
)
ConstructionSettings.__module__ = __name__


def parse_quotas(quotas: Mapping[str, int]) -> tuple[tuple[tuple[str, ...], int], ...]:
    """``{"Algebra": 150, "Algebra|Combinatorics": 50}`` → the core's quota table (keys split
    on ``|`` and sorted; table order kept)."""
    table = []
    for key, count in quotas.items():
        domains = tuple(sorted(part.strip() for part in key.split("|") if part.strip()))
        if not domains or int(count) < 0:
            raise ValueError(f"domain_quotas: bad entry {key!r}: {count!r}")
        table.append((domains, int(count)))
    return tuple(table)


class TournamentSettings(dg.Config):
    """The pairwise judge, the pairing strategy, the presentation order and the Bradley–Terry
    fit.

    ``presentation`` (``saber_core.tournament.presentation``): ``pool_order`` (one call, smaller
    position
    first), ``both_orders`` (two calls, averaged) or ``seeded_random`` (one call, seeded random
    order per pair); "" keeps ``judge_both_orders`` (both orders when true, else pool order).
    ``pairing: adaptive`` is the top-focused tournament of ``saber_core.tournament.adaptive``:
    ``rounds``
    is then its most rounds, ``adaptive_warmup`` of them Swiss; a query stops when its
    posterior nDCG@10 reaches ``adaptive_stop_ndcg``.
    """

    judge: Literal["embedding", "lexical", "llm"] = "embedding"
    judge_mode: Literal["choice", "generate"] = "choice"
    judge_both_orders: bool = True
    judge_max_tokens: int = 4096
    presentation: Literal["", "pool_order", "both_orders", "seeded_random"] = ""
    rounds: int = 8
    pairing: Literal["swiss", "information", "adaptive"] = "swiss"  # swiss: the published method
    bt_soft: bool = False  # fit BT (and information/adaptive pairing) on the probabilities
    bt_c: float = 1.0
    adaptive_warmup: int = 4
    adaptive_stop_ndcg: float = 0.9
    adaptive_min_weight: float = 0.02
    adaptive_draws: int = 200

    def presentation_order(self) -> str:
        """The effective presentation order (``presentation``, else from ``judge_both_orders``)."""
        if self.presentation:
            return self.presentation
        return "both_orders" if self.judge_both_orders else "pool_order"


class SlurmSettings(dg.Config):
    """Cluster profile and per-build overrides (``SABER_SLURM_<FIELD>``; "" or < 0 = profile's).

    ``mode``: ``allocation`` (one LLM-server allocation per model and run, fed stage by stage)
    or ``per_shard`` (one job per shard); "" keeps the cluster profile's (default allocation).
    ``orphan_poll_seconds``: how often the orphan sensor looks at the cluster.
    """

    profile: str = "dev"
    mode: Literal["", "allocation", "per_shard"] = ""
    orphan_poll_seconds: int = 120
    shard_size: int = 0
    max_retries: int = -1
    partition: str = ""
    account: str = ""
    time_limit: str = ""
    gpus_per_node: int = -1


class AllPairsSettings(dg.Config):
    """All-pairs discovery (``method: sabermath``): how its passes are cut and where they run.
    None of these changes a result (units add up exactly)."""

    workers: int = 0  # threads on this machine (0: every core)
    units: int = 0  # row ranges per pass, each committed when done (0: ~250M pairs each)
    shards: int = 4  # SLURM CPU jobs per pass under execution: slurm
    shard_cpus: int = 2  # CPUs (threads) of each shard job
    shard_partition: str = ""  # SLURM partition of the shard jobs ("": the SLURM profile's)
    shard_mem: str = ""  # --mem of each shard job ("": the SLURM profile's)
    shard_time: str = ""  # --time of each shard job ("": the SLURM profile's time_limit)
    checkpoint_seconds: float = 60.0  # each thread saves its finished units at most this often


class ValiditySettings(dg.Config):
    """Rating intervals, round-robin sample, contamination gate and recipe sensitivity."""

    bootstrap: int = 200
    rr_queries: int = 3
    contamination_corpus: str = ""
    contam_ngram: int = 8
    contam_threshold: float = 0.35
    recipe_summaries: str = "auto"  # auto | none | a {doc_id, summary} JSONL/parquet file
    recipe_queries: int = 0  # queries in the other-recipe tournament (seeded sample; 0 = all)


class AutomationSettings(dg.Config):
    """Scheduled rebuilds and the input-change sensor."""

    rebuild_cron: str = ""
    watch_inputs: bool = False
    watch_interval_seconds: int = 60


class BuildConfig(dg.ConfigurableResource):
    """Every setting of a build (recorded in provenance via each stage's ``config_hash``)."""

    profile: str = "default"
    home: str = ".saber"
    seed: int = 0
    method: Literal["platform", "sabermath"] = "platform"
    execution: Literal["local", "slurm"] = "local"
    inputs: InputSettings = InputSettings()
    annotation: AnnotationSettings = AnnotationSettings()
    llm: LLMSettings = LLMSettings()
    pools: PoolSettings = PoolSettings()  # type: ignore[valid-type]
    construction: ConstructionSettings = ConstructionSettings()  # type: ignore[valid-type]
    tournament: TournamentSettings = TournamentSettings()
    slurm: SlurmSettings = SlurmSettings()
    allpairs: AllPairsSettings = AllPairsSettings()
    validity: ValiditySettings = ValiditySettings()
    automation: AutomationSettings = AutomationSettings()

    def construction_plan(self) -> Construction:
        """The resolved construction: the ``method`` preset with every explicitly set step."""
        c = self.construction
        steps = {name: getattr(c, name) for name in CHOICES}
        return resolve(self.method, c.sabermath_fixes, c.threshold_quantile, **steps)

    def domain_quotas(self) -> tuple[tuple[tuple[str, ...], int], ...]:
        """The final sampler's quota table: ``domain_quotas``, else the published table."""
        return parse_quotas(self.construction.domain_quotas) or DOMAIN_QUOTAS

    def domain_map(self) -> tuple[tuple[str, str], ...]:
        """First level below the root → domain: ``domain_map``, else the published map."""
        return tuple(self.construction.domain_map.items()) or DOMAIN_MAP

    def pool_config(self) -> PoolConfig:
        """The pool-selection part of the config, as the core dataclass."""
        names = {f.name for f in dataclasses.fields(PoolConfig)}
        values = {k: v for k, v in self.pools.model_dump().items() if k in names}
        return PoolConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})

    @property
    def paths(self) -> SaberPaths:
        """The files under this build's SABER home."""
        return SaberPaths(Path(self.home).resolve())

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


SECTION_PREFIX = {"llm": "llm_", "slurm": "slurm_", "allpairs": "allpairs_"}
RENAMED = {
    ("pools", "fallback"): "pool_fallback",
    ("validity", "bootstrap"): "validity_bootstrap",
    ("validity", "rr_queries"): "validity_rr_queries",
}


def _sections() -> dict[str, type[dg.Config]]:
    return {
        name: info.annotation
        for name, info in BuildConfig.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, dg.Config)
    }


def flat_names() -> dict[str, tuple[str | None, str]]:
    """Flat setting name → (section or None, field): the ``SABER_<NAME>`` variables and the keys
    of a flat profile. Every name is unique."""
    table: dict[str, tuple[str | None, str]] = {}
    sections = _sections()
    for name in BuildConfig.model_fields:
        if name not in sections:
            table[name] = (None, name)
    for section, cls in sections.items():
        for field in cls.model_fields:
            flat = RENAMED.get((section, field), SECTION_PREFIX.get(section, "") + field)
            if flat in table:
                raise RuntimeError(f"config: flat name {flat!r} is used twice")
            table[flat] = (section, field)
    return table


def _parse_env(text: str, annotation: Any) -> Any:
    """An environment value for a field: JSON for list and mapping settings, else the string
    (pydantic converts numbers and booleans)."""
    if typing.get_origin(annotation) in (list, dict) or annotation in (list, dict):
        stripped = text.strip()
        if stripped.startswith(("[", "{")):
            return json.loads(stripped)
        return [part.strip() for part in stripped.split(",") if part.strip()]
    return text


def _place(values: dict[str, Any], key: str, value: Any, where: str) -> None:
    """Put a flat or nested setting into the nested ``values``."""
    sections = _sections()
    if key in sections and isinstance(value, Mapping):
        unknown = set(value) - set(sections[key].model_fields)
        if unknown:
            raise ValueError(f"{where}: unknown setting(s) {sorted(unknown)} in section {key!r}")
        values.setdefault(key, {}).update(value)
        return
    table = flat_names()
    if key not in table:
        raise ValueError(f"{where}: unknown setting(s) [{key!r}]")
    section, field = table[key]
    if section is None:
        values[field] = value
    else:
        values.setdefault(section, {})[field] = value


def load_build_config(profile: str | None = None, **overrides: object) -> BuildConfig:
    """Build config from a profile, ``SABER_*`` environment overrides, then explicit overrides
    (flat names, or a section name with a mapping)."""
    path = profile_path(profile)
    values: dict[str, Any] = {}
    for key, value in (yaml.safe_load(path.read_text()) or {}).items():
        _place(values, key, value, f"profile {path}")
    values["profile"] = path.stem
    values["home"] = os.environ.get("SABER_HOME", values.get("home", ".saber"))
    sections = _sections()
    for flat, (section, field) in flat_names().items():
        env = os.environ.get(f"SABER_{flat.upper()}")
        if env is None or flat in ("profile", "home"):
            continue
        owner = sections[section] if section else BuildConfig
        _place(values, flat, _parse_env(env, owner.model_fields[field].annotation), "environment")
    for key, value in overrides.items():
        _place(values, key, value, "override")
    return BuildConfig(**values)
