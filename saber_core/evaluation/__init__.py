"""Retrieval metrics (:mod:`.metrics`: nDCG@k with exponential or trec_eval's linear gain) and
paired bootstrap confidence (:mod:`.confidence`)."""
