"""Queries and candidate pools, by two engines.

Per query (platform): sampled queries (:mod:`.pools`), query × corpus score matrices built block
by block (:mod:`.blocks`, :mod:`.per_query`) and per-query thresholds. All pairs (published):
every ordered pair scored by a compiled kernel (:mod:`.pair_kernel`, :mod:`.databank`) in
resumable passes (:mod:`.passes`), global thresholds (:mod:`.global_threshold`), eligible rows and
replayed draws (:mod:`.all_pairs`), the final domain-quota sampler (:mod:`.final_sampler`)."""
