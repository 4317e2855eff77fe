"""The resolved build plan: every option of a build in its one home, presets applied, settings that
depend on each other derived once, and conflicts refused — the only thing a stage reads.

:func:`resolve_plan` turns a :class:`~saber_config.schema.BuildConfig` into a frozen
:class:`BuildPlan`:

* the ``method`` preset (``platform`` or ``sabermath``, :mod:`saber_core.construction`) fills every
  step, the threshold mode, the pairing and the Bradley–Terry fit the user left empty;
* derived settings are decided here and nowhere else: the construction's ``thresholds`` and
  ``targets`` from ``thresholds.mode``, its ``swiss`` from ``tournament.pairing``, its ``bt``
  from ``rating.fit``; the presentation order from the judge and the pairing; the tournament
  seed from the seed policy (42 under ``published_swiss`` as published, else ``seed``); the
  Bradley–Terry C (``rating.c: auto``: the label-budget study's chosen C, :func:`chosen_c`);
* the published-defect fixes that are really options become those options (``presentation`` →
  ``tournament.presentation: seeded_random``, ``bt_exact`` → ``rating.fit: exact``);
* two explicit settings that contradict each other are a :class:`PlanError` naming both, with
  where each came from (profile, environment, override);
* :attr:`TournamentPlan.rules` carries only what decides the pairs of the chosen pairing (the
  other pairings' settings at their defaults), so a stage's fingerprint moves only when its
  inputs do.

A stage reads the plan through :class:`~saber_config.reads.PlanReads`, which records
every field it reads: those reads are the stage's fingerprint (no hand-kept key lists).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from saber_core.construction import GLOBAL_THRESHOLDS, OPTION_STEPS, Construction, preset, resolve
from saber_core.discovery.pools import PoolConfig
from saber_core.published import DOMAIN_MAP, DOMAIN_QUOTAS, SWISS_SEED, parse_fixes
from saber_core.tournament.adaptive import DEFAULT_RULE, AdaptiveRule
from saber_core.tournament.judgment_table import RoundRules
from saber_core.tournament.presentation import calls_per_pair
from saber_store.paths import SaberPaths

if TYPE_CHECKING:
    from saber_config.schema import (
        AllPairsSettings,
        AnnotationSettings,
        AutomationSettings,
        BuildConfig,
        InputSettings,
        LLMSettings,
        RatingSettings,
        SlurmSettings,
        ThresholdSettings,
        TournamentSettings,
        ValiditySettings,
    )

OPTION_FIXES = ("presentation", "bt_exact")  # fixes that are options of the plan


class PlanError(ValueError):
    """Settings that cannot be built together (the message names each key and its origin)."""


class Written:
    """A resolved section that keeps the section as written (``written``) for every setting it
    does not resolve itself: a new option of the section is in the plan with no edit here."""

    def __getattr__(self, name: str) -> Any:
        if name == "written":
            raise AttributeError(name)
        return getattr(self.written, name)


@dataclass(frozen=True)
class ThresholdsPlan(Written):
    """What high and low mean: ``mode`` resolved (``global_percentile`` | ``quantile`` |
    ``absolute``); the global ``quantile`` and the per-query cuts as written."""

    written: ThresholdSettings
    mode: str

    @property
    def engine(self) -> str:
        """``all_pairs`` for global thresholds, else ``per_query``."""
        return "all_pairs" if self.mode == GLOBAL_THRESHOLDS else "per_query"


@dataclass(frozen=True)
class PoolsPlan:
    """How many queries, and the pool selection of the per-query engine (:class:`PoolConfig`)."""

    n_queries: int
    neighbours_kept: int
    config: PoolConfig
    query_draw: str = "shuffle"

    @property
    def sizes(self) -> tuple[int, int, int]:
        """Group sizes (topic-only, summary-only, both)."""
        c = self.config
        return (c.n_topic_only, c.n_summary_only, c.n_both)


@dataclass(frozen=True)
class DomainsPlan:
    """The final sampler's quota table and the tag → domain map (published by default)."""

    quotas: tuple[tuple[tuple[str, ...], int], ...]
    map: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TournamentPlan(Written):
    """The judge and the rounds: ``pairing``, ``presentation`` and ``seed`` resolved, ``rules``
    (what decides each round's pairs and order) derived; the rest as written."""

    written: TournamentSettings
    pairing: str
    presentation: str
    seed: int
    rules: RoundRules

    @property
    def calls_per_judgment(self) -> int:
        """Judge calls one judged pair costs: 2 for the LLM judge asking both orders, else 1."""
        return calls_per_pair(self.presentation) if self.judge == "llm" else 1

    @property
    def shown_first(self) -> str:
        """Which candidate of a pair the judge sees first (as the judgments record it)."""
        return self.rules.shown_first if self.presentation != "both_orders" else "both_orders"


@dataclass(frozen=True)
class RatingPlan(Written):
    """Bradley–Terry: ``fit`` resolved (``exact`` | ``sklearn_lbfgs``), the L2 ``c`` resolved
    (``auto``: the study's chosen C); ``soft`` outcomes as written."""

    written: RatingSettings
    fit: str
    c: float


@dataclass(frozen=True)
class AuditPlan:
    """The published-defect audit: the fixes to replay (``all`` = every applicable one) and the
    sampled queries (0 = all)."""

    fixes: tuple[str, ...]
    queries: int


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build runs, resolved (module docstring)."""

    profile: str
    method: str
    execution: str
    seed: int
    paths: SaberPaths
    inputs: InputSettings
    annotation: AnnotationSettings
    llm: LLMSettings
    pools: PoolsPlan
    thresholds: ThresholdsPlan
    construction: Construction
    domains: DomainsPlan
    tournament: TournamentPlan
    rating: RatingPlan
    audit: AuditPlan
    validity: ValiditySettings
    automation: AutomationSettings
    slurm: SlurmSettings
    allpairs: AllPairsSettings
    origins: Mapping[str, str]

    @property
    def engine(self) -> str:
        """The discovery engine: ``all_pairs`` or ``per_query``."""
        return self.thresholds.engine


def _origin(config: BuildConfig, key: str) -> str:
    return config.explicit.get(key, "")


def _name(config: BuildConfig, key: str) -> str:
    origin = _origin(config, key)
    return f"{key} ({origin})" if origin else key


def conflict(config: BuildConfig, key: str, other: str, why: str) -> PlanError:
    """The error for two settings that cannot hold together, naming both and their origins."""
    return PlanError(f"{_name(config, key)} conflicts with {_name(config, other)}: {why}")


def _threshold_mode(config: BuildConfig) -> str:
    return config.thresholds.mode or preset(config.method).thresholds


def _fixes(config: BuildConfig) -> tuple[str, ...]:
    try:
        return parse_fixes(config.construction.fixes)
    except ValueError as exc:
        raise PlanError(f"construction.fixes: {exc}") from exc


def _pairing(config: BuildConfig, fixes: tuple[str, ...]) -> str:
    pairing = config.tournament.pairing or preset(config.method).pairing
    if "sit_outs" in fixes and pairing != "published_swiss":
        raise conflict(
            config,
            "construction.fixes",
            "tournament.pairing",
            f"the fix sit_outs changes the published Swiss pairing, not {pairing!r}",
        )
    return pairing


def _presentation(config: BuildConfig, pairing: str, fixes: tuple[str, ...]) -> str:
    t = config.tournament
    chosen = t.presentation
    if "presentation" in fixes:
        if chosen and chosen != "seeded_random":
            raise conflict(
                config,
                "construction.fixes",
                "tournament.presentation",
                f"the fix presentation is presentation: seeded_random, not {chosen!r}",
            )
        if pairing != "published_swiss":
            raise conflict(
                config,
                "construction.fixes",
                "tournament.pairing",
                f"the fix presentation changes the published Swiss pairing, not {pairing!r}",
            )
        chosen = "seeded_random"
    if chosen == "both_orders" and t.judge != "llm":
        raise conflict(
            config,
            "tournament.presentation",
            "tournament.judge",
            f"both orders means two LLM calls per pair; the {t.judge} judge answers once",
        )
    if chosen == "both_orders" and pairing == "published_swiss":
        raise conflict(
            config,
            "tournament.presentation",
            "tournament.pairing",
            "the published Swiss pairing shows each pair once (pool_order or seeded_random)",
        )
    if chosen:
        return chosen
    return "both_orders" if t.judge == "llm" and pairing != "published_swiss" else "pool_order"


def _fit(config: BuildConfig, fixes: tuple[str, ...]) -> str:
    fit = config.rating.fit
    if "bt_exact" in fixes:
        if fit == "sklearn_lbfgs":
            raise conflict(
                config,
                "construction.fixes",
                "rating.fit",
                "the fix bt_exact is rating.fit: exact",
            )
        return "exact"
    fit = fit or preset(config.method).bt
    if config.rating.style_control and fit == "sklearn_lbfgs":
        raise conflict(
            config,
            "rating.style_control",
            "rating.fit",
            "the style-controlled fit is the exact penalized optimum (set rating.fit: exact)",
        )
    return fit


CHOOSE_C_FIX = "run `saber study budget --judge-fit judge-probe.json --choose-c`"


def chosen_c(config: BuildConfig) -> float:
    """``rating.c`` resolved: as written, or under ``auto`` the C of the chosen-C file
    (``rating.c_file``, "" = the study's default output under the SABER home); PlanError naming
    the fix when that file is missing or holds no C."""
    r = config.rating
    if r.c != "auto":
        if r.c_file:
            raise conflict(config, "rating.c_file", "rating.c", "the file is read only by c: auto")
        return float(r.c)
    path = Path(r.c_file) if r.c_file else SaberPaths.at(config.home).chosen_c
    where = f"--out {path.parent}" if r.c_file else "the default --out"
    if not path.is_file():
        raise PlanError(
            f"rating.c: auto reads the label-budget study's chosen C from {path}, which does not "
            f"exist: {CHOOSE_C_FIX} ({where}), or set rating.c to a number"
        )
    try:
        data = json.loads(path.read_text())
        c = float(data.get("choose_c", data)["C"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PlanError(
            f"rating.c: auto: {path} holds no chosen C ({exc!r}): {CHOOSE_C_FIX} ({where})"
        ) from exc
    if not c > 0:
        raise PlanError(f"rating.c: auto: {path} gives C = {c}, not a positive number")
    return c


def _check_triage(config: BuildConfig) -> None:
    """``tournament.triage`` needs grades (``tournament.pointwise_judge``) and sane cuts."""
    t = config.tournament
    if t.triage != "off" and not t.pointwise_judge:
        raise conflict(
            config,
            "tournament.triage",
            "tournament.pointwise_judge",
            "triage decides pairs from pointwise grades: name a grader (e.g. st:minilm)",
        )
    if t.triage == "band" and not t.triage_low <= t.triage_high:
        raise conflict(config, "tournament.triage_low", "tournament.triage_high", "need low ≤ high")
    if t.triage == "calibrated" and not 0.0 < t.triage_threshold <= 0.5:
        raise PlanError(
            f"{_name(config, 'tournament.triage_threshold')}: must lie in (0, 0.5] "
            f"(|p − ½| ≥ threshold decides a pair), got {t.triage_threshold}"
        )


def _rules(config: BuildConfig, pairing: str, presentation: str, seed: int, c: float) -> RoundRules:
    """The round rules, with only what decides the chosen pairing's pairs set."""
    t, r = config.tournament, config.rating
    order = "pool_order" if presentation == "both_orders" else presentation
    if pairing == "published_swiss":
        return RoundRules(
            strategy="published",
            seed=seed,
            n_rounds=t.rounds,
            sit_outs="sit_outs" in parse_fixes(config.construction.fixes),
            presentation=presentation == "seeded_random",
            order="pool_order",
        )
    refits = pairing in ("information", "adaptive")
    rule = (
        AdaptiveRule(
            warmup=t.adaptive_warmup,
            stop_ndcg=t.adaptive_stop_ndcg,
            draws=t.adaptive_draws,
            min_weight=t.adaptive_min_weight,
        )
        if pairing == "adaptive"
        else DEFAULT_RULE
    )
    return RoundRules(
        strategy=pairing,
        seed=seed,
        soft=r.soft if refits else False,
        C=c if refits else 1.0,
        n_rounds=0,
        order=order,
        rule=rule,
    )


def _construction(config: BuildConfig, mode: str, pairing: str, fit: str, fixes, presentation):
    steps = {name: getattr(config.construction, name) for name in OPTION_STEPS}
    step_fixes = [f for f in fixes if f not in OPTION_FIXES]
    if pairing == "published_swiss" and presentation == "seeded_random":
        step_fixes.append("presentation")
    try:
        return resolve(
            config.method,
            step_fixes,
            config.thresholds.quantile,
            thresholds=mode,
            targets="eligible_rows" if mode == GLOBAL_THRESHOLDS else "sampled_queries",
            pairing=pairing,
            bt=fit,
            **steps,
        )
    except ValueError as exc:
        raise PlanError(f"{exc} (thresholds.mode={mode!r}, method={config.method!r})") from exc


def _quotas(config: BuildConfig) -> DomainsPlan:
    table = []
    for key, count in config.construction.domain_quotas.items():
        domains = tuple(sorted(part.strip() for part in key.split("|") if part.strip()))
        if not domains or int(count) < 0:
            raise PlanError(f"construction.domain_quotas: bad entry {key!r}: {count!r}")
        table.append((domains, int(count)))
    return DomainsPlan(
        quotas=tuple(table) or DOMAIN_QUOTAS,
        map=tuple(config.construction.domain_map.items()) or DOMAIN_MAP,
    )


def _pools(config: BuildConfig, mode: str) -> PoolsPlan:
    p, t = config.pools, config.thresholds
    if p.query_draw != "shuffle" and mode == GLOBAL_THRESHOLDS:
        raise conflict(
            config,
            "pools.query_draw",
            "thresholds.mode",
            "the all-pairs engine draws its queries with the final sampler; query_draw is the "
            "per-query engine's",
        )
    per_query = "absolute" if mode == "absolute" else "quantile"
    try:
        pool = PoolConfig(
            n_topic_only=p.n_topic_only,
            n_summary_only=p.n_summary_only,
            n_both=p.n_both,
            threshold_mode=per_query,
            topic_high=t.topic_high,
            topic_low=t.topic_low,
            summary_high=t.summary_high,
            summary_low=t.summary_low,
            near_duplicate_cut=p.near_duplicate_cut,
            fallback=p.fallback,
        )
    except ValueError as exc:
        raise PlanError(str(exc).replace("PoolConfig.", "thresholds/pools: ")) from exc
    return PoolsPlan(
        n_queries=p.n_queries,
        neighbours_kept=p.neighbours_kept,
        config=pool,
        query_draw=p.query_draw,
    )


def resolve_plan(config: BuildConfig) -> BuildPlan:
    """The validated plan of ``config`` (module docstring); :class:`PlanError` on conflicts."""
    fixes = _fixes(config)
    mode = _threshold_mode(config)
    pairing = _pairing(config, fixes)
    presentation = _presentation(config, pairing, fixes)
    fit = _fit(config, fixes)
    c = chosen_c(config)
    _check_triage(config)
    t = config.tournament
    policy = SWISS_SEED if pairing == "published_swiss" else config.seed
    seed = t.seed if t.seed is not None else policy
    thresholds = ThresholdsPlan(written=config.thresholds, mode=mode)
    tournament = TournamentPlan(
        written=t,
        pairing=pairing,
        presentation=presentation,
        seed=seed,
        rules=_rules(config, pairing, presentation, seed, c),
    )
    return BuildPlan(
        profile=config.profile,
        method=config.method,
        execution=config.execution,
        seed=config.seed,
        paths=SaberPaths.at(config.home, config.embedding_cache),
        inputs=config.inputs,
        annotation=config.annotation,
        llm=config.llm,
        pools=_pools(config, mode),
        thresholds=thresholds,
        construction=_construction(config, mode, pairing, fit, fixes, presentation),
        domains=_quotas(config),
        tournament=tournament,
        rating=RatingPlan(written=config.rating, fit=fit, c=c),
        audit=AuditPlan(
            fixes=tuple(config.construction.audit_fixes), queries=config.construction.audit_queries
        ),
        validity=config.validity,
        automation=config.automation,
        slurm=config.slurm,
        allpairs=config.allpairs,
        origins=dict(config.explicit),
    )
