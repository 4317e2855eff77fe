"""Group ``validity``: rating intervals, recipe sensitivity, the published-defect audit and
the validity report."""

from saber_assets.validity.assets import (
    rating_intervals,
    recipe_sensitivity_asset,
    validity_report,
)
from saber_assets.validity.audit import audit_asset

__all__ = ["audit_asset", "rating_intervals", "recipe_sensitivity_asset", "validity_report"]
