"""Group ``export``: the released benchmark files, the build manifest and the build report."""

from saber_assets.export.assets import benchmark_export, build_manifest_asset, build_report_asset

__all__ = ["benchmark_export", "build_manifest_asset", "build_report_asset"]
