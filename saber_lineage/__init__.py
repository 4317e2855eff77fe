"""What a table records of how it was made: the code version of every module an asset reaches
(:mod:`.code_version`) and the provenance of LLM-derived rows and exports (:mod:`.provenance`)."""
