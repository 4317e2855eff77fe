"""Group ``validity``: rating intervals, recipe sensitivity and the validity report."""

from saber_assets.validity.assets import (
    rating_intervals,
    recipe_sensitivity_asset,
    validity_report,
)

__all__ = ["rating_intervals", "recipe_sensitivity_asset", "validity_report"]
