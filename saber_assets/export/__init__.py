"""Group ``export``: the released benchmark files and the build report."""

from saber_assets.export.assets import benchmark_export, build_report_asset

__all__ = ["benchmark_export", "build_report_asset"]
