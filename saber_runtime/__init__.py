"""The Dagster-side mechanism every SABER asset uses: honest code versions
(:mod:`~saber_lineage.code_version`), reuse-or-compute with lineage (:mod:`~saber_runtime.stage`),
metadata and check helpers (:mod:`~saber_runtime.metadata`), retries of LLM stages
(:mod:`~saber_runtime.errors`)."""
