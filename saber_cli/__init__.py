"""The ``saber`` command (:mod:`saber_cli.main`): build, export, lineage, synth, and the
Dagster-free ``saber eval`` and ``saber study``."""
