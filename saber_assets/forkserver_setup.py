"""The first module the forkserver of Dagster's multiprocess executor imports
(``definitions.PRELOAD``); nothing else imports it. Every step forked from the server inherits:

* OpenMP threads that sleep when idle (``OMP_WAIT_POLICY=PASSIVE`` unless already set). Steps
  run side by side on the machine's cores, and OpenMP's default spin-wait makes two torch steps
  (``recipe_sensitivity`` and ``retriever_runs``) burn the cores each other needs: 14.2 s and
  12.3 s side by side on 2 cores, 4.5 s and 2.5 s passive. OpenMP reads the variable when torch
  loads it, hence first in the preload list, before anything imports torch.
* The project's sources already parsed for the code versions every step computes
  (:mod:`saber_lineage.code_version`; ~140 files, half a second per step otherwise). The cache
  is keyed by the source text: a file edited after the server started is parsed again.

No model is loaded and no thread started here (the server forks after these imports).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from saber_lineage.code_version import module_closure  # after the variable: see above

PARSED_FILES = len(module_closure("saber_assets.definitions"))
