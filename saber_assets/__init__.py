"""Dagster assets of the SABER platform: one module per pipeline stage, one ``Definitions``."""
