"""The two relevance signals of a document pair, each published variant beside the platform one.

Topic similarity: Lin/BMA on the DAG (:mod:`.lin_bma`, platform: Seco IC, mean of means) and on
the tag-path tree (:mod:`.lin_published`, :mod:`.bma_published`: corpus-frequency IC, pooled
BMA, float16). Summary similarity: Jaccard of word sets (:mod:`.jaccard`, platform tokenizer;
:mod:`.jaccard_published`, the published tokenizer and stop words)."""
