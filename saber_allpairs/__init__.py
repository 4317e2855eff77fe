"""The all-pairs pass as the discovery assets run it, without Dagster (:mod:`.runner`): reuse,
growth, resume, local threads or SLURM shards, progress through a ``PassLog``. What a pass
computes is :mod:`saber_core.discovery.pass_totals`; the checkpoints both ends read are
:mod:`saber_compute.pass_checkpoint`; the shard jobs are :mod:`saber_slurm.allpairs_jobs`."""
