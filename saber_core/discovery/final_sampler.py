"""docs/sabermath.md §9: the final sampler (``build_benchmark/select/final_sampler.py``; the domain
mapping of
``build_benchmark/select/utils.py``).

* A tag's domain is the map's value for its first level below the root, ``tag.split("/")[2]``
  (``/Mathematics/NumberTheory/...`` → "Number Theory"); other branches have none. A target's
  key is the sorted tuple of the distinct domains of its (cleaned) tags.
* Buckets in quota-table order (published :data:`~saber_core.published.DOMAIN_QUOTAS`,
  1,000 queries); a target whose key is not in the table is never chosen. After
  ``random.seed(seed)`` (README ``--seed 0``) each bucket draws ``random.sample(bucket, quota)``
  — a ``random.Random(seed)`` instance gives the same draws. A bucket smaller than its quota is an
  error. The output is bucket by bucket, in draw order.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import numpy as np

from saber_core.published import DOMAIN_MAP, DOMAIN_QUOTAS, FINAL_SAMPLER_SEED


def tag_domains(
    tags: Iterable[str], domain_map: Iterable[tuple[str, str]] = DOMAIN_MAP
) -> tuple[str, ...]:
    """The sorted distinct domains of a target's tags (``tag.split("/")[2]`` through
    ``domain_map``). A tag with no level below the root has none (the published helper would
    raise IndexError)."""
    mapping = dict(domain_map)
    found = set()
    for tag in tags:
        parts = tag.split("/")
        if len(parts) > 2 and parts[2] in mapping:
            found.add(mapping[parts[2]])
    return tuple(sorted(found))


def sample_final_queries(
    domain_keys: Sequence[tuple[str, ...]],
    quotas: Iterable[tuple[tuple[str, ...], int]] = DOMAIN_QUOTAS,
    seed: int = FINAL_SAMPLER_SEED,
) -> np.ndarray:
    """Positions (into ``domain_keys``, one sorted domain tuple per target) of the sampled
    queries, bucket by bucket in table order, each in draw order (module docstring).

    ValueError naming the bucket, its size and its quota when a bucket is too small.
    """
    quotas = [(tuple(key), int(quota)) for key, quota in quotas]
    buckets: dict[tuple[str, ...], list[int]] = {key: [] for key, _ in quotas}
    for position, key in enumerate(domain_keys):
        bucket = buckets.get(tuple(key))
        if bucket is not None:
            bucket.append(position)
    draw = random.Random(seed)
    chosen: list[int] = []
    for key, quota in quotas:
        bucket = buckets[key]
        if len(bucket) < quota:
            raise ValueError(
                f"bucket {key} has {len(bucket)} targets, fewer than its quota of {quota}"
            )
        chosen.extend(draw.sample(bucket, quota))
    return np.array(chosen, dtype=np.int64)
