"""docs/sabermath.md §2: Tag-set clean-up
(``build_benchmark/annotate/postprocess/post_process_datasets.py``,
``clear_tags`` and the row filter).

Published rule: deduplicate, sort as plain strings, then drop a tag ``t`` when the **next** tag
in that order starts with ``t.rstrip("/") + "/"``. It keeps the deepest tags, but because ``-``
sorts before ``/`` an ancestor ``X`` survives when a sibling ``X-Y`` sits between ``X`` and
``X/child``.

Fix ``ancestor_check``: drop every tag ``t`` for which *any other* tag of the set starts with
``t.rstrip("/") + "/"`` (a proper path-prefix). The result stays in sorted order either way.

A databank row is kept when its cleaned tag list is non-empty and its idea is not blank after
``str.strip()``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

import numpy as np


def _has_other_below(ordered: list[str], tag: str) -> bool:
    """Whether some tag of the sorted list other than ``tag`` starts with ``tag``'s prefix."""
    prefix = tag.rstrip("/") + "/"
    # The strings starting with ``prefix`` are exactly those in [prefix, prefix[:-1] + "0").
    lo = bisect_left(ordered, prefix)
    hi = bisect_left(ordered, prefix[:-1] + "0", lo)
    return hi - lo > (1 if tag.startswith(prefix) else 0)


def clean_tags(tags: Iterable[str], *, ancestor_check: bool = False) -> list[str]:
    """The cleaned, sorted tag list (module docstring): published immediate-successor check, or
    with ``ancestor_check`` every proper path-prefix of another tag dropped."""
    ordered = sorted(set(tags))
    if ancestor_check:
        return [tag for tag in ordered if not _has_other_below(ordered, tag)]
    last = len(ordered) - 1
    return [
        tag
        for i, tag in enumerate(ordered)
        if i == last or not ordered[i + 1].startswith(tag.rstrip("/") + "/")
    ]


def clean_databank(
    tag_rows: Sequence[Iterable[str]],
    ideas: Sequence[str | None],
    *,
    ancestor_check: bool = False,
) -> tuple[np.ndarray, list[list[str]]]:
    """Clean every row's tags and drop the rows with no tag left or a blank idea.

    The idea column is attached by row position (``ideas[i]`` belongs to ``tag_rows[i]``); a
    ``None`` idea counts as blank. Returns the kept row indices (int64, ascending) and their
    cleaned tag lists.
    """
    if len(tag_rows) != len(ideas):
        raise ValueError(f"{len(tag_rows)} tag rows but {len(ideas)} ideas: they pair by position")
    kept: list[int] = []
    cleaned: list[list[str]] = []
    for row, (tags, idea) in enumerate(zip(tag_rows, ideas, strict=True)):
        tags_clean = clean_tags(tags, ancestor_check=ancestor_check)
        if tags_clean and idea is not None and idea.strip():
            kept.append(row)
            cleaned.append(tags_clean)
    return np.array(kept, dtype=np.int64), cleaned
