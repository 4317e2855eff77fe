"""Group ``discovery``: queries, relevance signals and candidate pools — per query
(:mod:`.per_query`, the platform construction) or over all pairs of the corpus
(:mod:`.all_pairs`, the published construction)."""

from __future__ import annotations

import dagster as dg

from saber_assets.discovery.all_pairs_pools import ALL_PAIRS_ASSETS
from saber_assets.discovery.per_query_pools import PER_QUERY_ASSETS
from saber_config import BuildConfig


def discovery_assets(build: BuildConfig) -> list[dg.AssetsDefinition]:
    """The discovery engine the construction names (``targets``)."""
    engine = build.plan().engine
    return ALL_PAIRS_ASSETS if engine == "all_pairs" else PER_QUERY_ASSETS


def alternative_pools(engine: str):
    """The function re-selecting the queries' pools from another summary recipe, for the
    discovery engine ``engine`` (the recipe-sensitivity stage)."""
    from saber_assets.discovery import all_pairs_pools, per_query_pools

    if engine == "all_pairs":
        return all_pairs_pools.alternative_pools
    return per_query_pools.alternative_pools
