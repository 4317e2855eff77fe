"""Loading a build's settings: a profile, then ``SABER_<NAME>`` variables, then explicit overrides.

Profiles are YAML files in ``profiles/`` (``default``, ``paper``, ``tiny``, …), chosen by
``SABER_PROFILE`` (a profile name or a path to a YAML file). A profile may be nested
(``pools: {n_queries: 100}``) or flat (``n_queries: 100``). Every setting can be overridden by
``SABER_<NAME>`` where ``NAME`` is its flat name (:func:`flat_names`); list and mapping settings
take JSON. The environment is read here only (:func:`load_build_config`), never at import.

Every setting given records where it came from (``BuildConfig.explicit``: ``profile <path>``,
``env SABER_<NAME>``, ``override``): the plan never lets a preset replace it, and two given
settings that disagree are an error naming both. Names of earlier releases keep working
(:data:`LEGACY`): each is translated into the option that now holds it, and contradicting that
option is an error too.
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from saber_config.plan import PlanError
from saber_config.schema import LOCATIONS, SECTIONS, BuildConfig
from saber_store.paths import profile_path

SECTION_PREFIX = {"llm": "llm_", "slurm": "slurm_", "allpairs": "allpairs_"}
RENAMED = {  # (section, field) → flat name where the prefix rule does not apply
    ("pools", "fallback"): "pool_fallback",
    ("validity", "bootstrap"): "validity_bootstrap",
    ("validity", "rr_queries"): "validity_rr_queries",
    ("thresholds", "mode"): "threshold_mode",
    ("thresholds", "quantile"): "threshold_quantile",
    ("construction", "fixes"): "sabermath_fixes",
    ("tournament", "seed"): "tournament_seed",
    ("rating", "fit"): "bt",
    ("rating", "soft"): "bt_soft",
    ("rating", "c"): "bt_c",
    ("rating", "c_file"): "bt_c_file",
}


@dataclass(frozen=True)
class Legacy:
    """A name of an earlier release: the option that now holds it, the value it stands for, and
    the values of that option it agrees with."""

    target: str
    translate: Callable[[Any], tuple[Any, tuple[Any, ...]]]


def _same(value: Any) -> tuple[Any, tuple[Any, ...]]:
    return value, (value,)


def _both_orders(value: Any) -> tuple[Any, tuple[Any, ...]]:
    on = str(value).lower() in ("1", "true", "yes", "on")
    return (
        ("both_orders", ("both_orders",)) if on else ("pool_order", ("pool_order", "seeded_random"))
    )


def _swiss(value: Any) -> tuple[Any, tuple[Any, ...]]:
    return ("published_swiss" if value == "published" else "swiss"), (
        ("published_swiss",) if value == "published" else ("swiss", "information", "adaptive")
    )


def _engine(global_value: str) -> Callable[[Any], tuple[Any, tuple[Any, ...]]]:
    def translate(value: Any) -> tuple[Any, tuple[Any, ...]]:
        if value == global_value:
            return "global_percentile", ("global_percentile",)
        return "quantile", ("quantile", "absolute")

    return translate


LEGACY: dict[str, Legacy] = {  # dotted legacy name → its translation
    "construction.swiss": Legacy("tournament.pairing", _swiss),
    "construction.bt": Legacy("rating.fit", _same),
    "construction.thresholds": Legacy("thresholds.mode", _engine("global_percentile")),
    "construction.targets": Legacy("thresholds.mode", _engine("eligible_rows")),
    "construction.threshold_quantile": Legacy("thresholds.quantile", _same),
    "construction.swiss_seed": Legacy("tournament.seed", _same),
    "construction.sabermath_fixes": Legacy("construction.fixes", _same),
    "tournament.judge_both_orders": Legacy("tournament.presentation", _both_orders),
    "tournament.bt_soft": Legacy("rating.soft", _same),
    "tournament.bt_c": Legacy("rating.c", _same),
    "pools.threshold_mode": Legacy("thresholds.mode", _same),
    "pools.topic_high": Legacy("thresholds.topic_high", _same),
    "pools.topic_low": Legacy("thresholds.topic_low", _same),
    "pools.summary_high": Legacy("thresholds.summary_high", _same),
    "pools.summary_low": Legacy("thresholds.summary_low", _same),
}
LEGACY_FLAT = {  # flat legacy name → dotted legacy name
    "swiss": "construction.swiss",
    "thresholds": "construction.thresholds",
    "targets": "construction.targets",
    "swiss_seed": "construction.swiss_seed",
    "judge_both_orders": "tournament.judge_both_orders",
}


def flat_names() -> dict[str, tuple[str | None, str]]:
    """Flat setting name → (section or None, field): the ``SABER_<NAME>`` variables and the keys
    of a flat profile (legacy names excluded: :data:`LEGACY_FLAT`). Every name is unique."""
    table: dict[str, tuple[str | None, str]] = {}
    for name in BuildConfig.model_fields:
        if name not in SECTIONS and name != "explicit":
            table[name] = (None, name)
    for section, cls in SECTIONS.items():
        for field in cls.model_fields:
            flat = RENAMED.get((section, field), SECTION_PREFIX.get(section, "") + field)
            if flat in table or flat in LEGACY_FLAT:
                raise RuntimeError(f"config: flat name {flat!r} is used twice")
            table[flat] = (section, field)
    return table


def _annotation(dotted: str) -> Any:
    section, _, field = dotted.rpartition(".")
    owner = SECTIONS[section] if section else BuildConfig
    return owner.model_fields[field].annotation


def _parse_env(text: str, annotation: Any) -> Any:
    """An environment value for a field: JSON for list and mapping settings, else the string
    (pydantic converts numbers and booleans)."""
    origin = typing.get_origin(annotation)
    if origin in (list, dict) or annotation in (list, dict):
        stripped = text.strip()
        if stripped.startswith(("[", "{")):
            return json.loads(stripped)
        return [part.strip() for part in stripped.split(",") if part.strip()]
    if text.strip().lower() in ("", "none", "null") and type(None) in typing.get_args(annotation):
        return None
    return text


class _Settings:
    """Given settings by dotted name, with their origins; legacy names kept apart."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.origins: dict[str, str] = {}
        self.legacy: dict[str, tuple[Any, str]] = {}

    def put(self, dotted: str, value: Any, origin: str) -> None:
        if dotted in LEGACY:
            self.legacy[dotted] = (value, origin)
            return
        self.values[dotted] = value
        self.origins[dotted] = origin

    def place(self, key: str, value: Any, origin: str) -> None:
        """A flat or nested setting (a section name with a mapping)."""
        if key in SECTIONS and isinstance(value, Mapping):
            for field, inner in value.items():
                dotted = f"{key}.{field}"
                if field not in SECTIONS[key].model_fields and dotted not in LEGACY:
                    raise ValueError(f"{origin}: unknown setting {field!r} in section {key!r}")
                self.put(dotted, inner, origin)
            return
        if key in LEGACY_FLAT:
            self.put(LEGACY_FLAT[key], value, origin)
            return
        table = flat_names()
        if key not in table:
            raise ValueError(f"{origin}: unknown setting {key!r}")
        section, field = table[key]
        self.put(f"{section}.{field}" if section else field, value, origin)

    def apply_legacy(self) -> None:
        """Translate the legacy names; a legacy name that contradicts the option it now means
        (given too) is a :class:`PlanError` naming both."""
        for dotted, (value, origin) in sorted(self.legacy.items()):
            legacy = LEGACY[dotted]
            meant, agrees = legacy.translate(value)
            if legacy.target in self.values:
                given = self.values[legacy.target]
                if given not in agrees and given != "":
                    raise PlanError(
                        f"{legacy.target} = {given!r} ({self.origins[legacy.target]}) conflicts "
                        f"with {dotted} = {value!r} ({origin}), which means "
                        f"{legacy.target} = {meant!r}"
                    )
                continue
            self.values[legacy.target] = meant
            self.origins[legacy.target] = f"{origin} as {dotted}"

    def nested(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for dotted, value in self.values.items():
            section, _, field = dotted.rpartition(".")
            (out.setdefault(section, {}) if section else out)[field] = value
        return out


def load_build_config(profile: str | None = None, **overrides: object) -> BuildConfig:
    """Build config from a profile, ``SABER_*`` environment overrides, then explicit overrides
    (flat names, or a section name with a mapping)."""
    path = profile_path(profile)
    given = _Settings()
    for key, value in (yaml.safe_load(path.read_text()) or {}).items():
        given.place(key, value, f"profile {path}")
    for flat, (section, field) in flat_names().items():
        env = os.environ.get(f"SABER_{flat.upper()}")
        if env is not None and flat not in ("profile", "home"):
            dotted = f"{section}.{field}" if section else field
            given.place(flat, _parse_env(env, _annotation(dotted)), f"env SABER_{flat.upper()}")
    for flat in LEGACY_FLAT:
        env = os.environ.get(f"SABER_{flat.upper()}")
        if env is not None:
            given.place(flat, env, f"env SABER_{flat.upper()}")
    for key, value in overrides.items():
        given.place(key, value, "override")
    given.apply_legacy()
    values = given.nested()
    values["profile"] = path.stem
    if given.origins.get("home") != "override":  # an explicit home wins, then $SABER_HOME
        values["home"] = os.environ.get("SABER_HOME", values.get("home", ".saber"))
    values["explicit"] = {
        k: v for k, v in given.origins.items() if k not in ("profile", *LOCATIONS)
    }
    return BuildConfig(**values)
