"""Paper-scale benchmark of the SABER core algorithms (``python -m bench.run``)."""
