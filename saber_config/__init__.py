"""A build's configuration: what the user writes (:mod:`.schema`), how it is loaded from profiles
and ``SABER_*`` variables (:mod:`.loading`), the resolved plan every stage runs (:mod:`.plan`)
and the recording view a stage reads it through (:mod:`.reads`)."""

from saber_config.loading import flat_names, load_build_config
from saber_config.plan import BuildPlan, PlanError, resolve_plan
from saber_config.reads import PlanReads, unwrap
from saber_config.schema import BuildConfig

__all__ = [
    "BuildConfig",
    "BuildPlan",
    "PlanError",
    "PlanReads",
    "flat_names",
    "load_build_config",
    "resolve_plan",
    "unwrap",
]
