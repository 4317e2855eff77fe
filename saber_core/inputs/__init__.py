"""Inputs: corpus validation (:mod:`.corpus`), file formats (:mod:`.formats`), the synthetic
paper-shaped corpus (:mod:`.synth`) and summaries/topics taken from the corpus
(:mod:`.annotations`)."""
