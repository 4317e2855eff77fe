"""Dagster assets of the SABER platform: one module per asset group (``inputs``, ``annotation``,
``discovery``, ``tournament``, ``export``, ``validity``, ``evaluation``), the schedules and
sensors (``automation``), and the single ``Definitions`` (``definitions``)."""
