"""The LLM interface (:mod:`.interface`: requests, results, engines) and the engines: embedded
CPU (:mod:`.embedded`) and vLLM offline (:mod:`.vllm_offline`)."""
