"""Reproducible simulation studies of the SABER method (``saber study ...``)."""
