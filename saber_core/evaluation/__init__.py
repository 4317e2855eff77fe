"""Retrieval metrics (:mod:`.metrics`: nDCG@k with exponential or trec_eval's linear gain),
paired bootstrap confidence (:mod:`.confidence`) and Holm's multiple-testing correction
(:mod:`.multiple_testing`)."""
