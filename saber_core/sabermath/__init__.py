"""SABER-Math as published (nygeorgiev/sabermath @ 9f015a7, ``build_benchmark/``), as pure
functions, with an opt-in fix for each published defect (:mod:`.options`).

One module per step of SABERMATH-METHOD.md: :mod:`.frequency_tree` (§1), :mod:`.tags` (§2),
:mod:`.lin` (§3 information content, §4 Lin), :mod:`.bma` (§5), :mod:`.jaccard` (§6),
:mod:`.threshold` (§7), :mod:`.selection` (§8), :mod:`.final_sampler` (§9), :mod:`.swiss`
(§10), :mod:`.bradley_terry` (§11), :mod:`.options` (constants and fixes). No I/O, no Dagster,
no scikit-learn; every random step takes an explicit seed or generator.
"""
