"""Programs and engines that run where the model or the work is — a compute node, an engine
subprocess — with no Dagster: the LLM interface and engines (:mod:`.llm`), the LLM server of an
allocation (:mod:`.llm_server`), the one-shard payload (:mod:`.llm_shard`), the all-pairs shard
(:mod:`.allpairs_shard`) and the pass checkpoints both sides read (:mod:`.pass_checkpoint`)."""
