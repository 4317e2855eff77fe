"""docs/sabermath.md §1: The frequency tree, rebuilt from raw tag paths alone
(``build_benchmark/annotate/postprocess/extract_new_tree.py``; path look-up as in
``build_benchmark/similarities/compute/tree.py``).

A tag is a path ``/Mathematics/Algebra/...``; its titles are the non-empty parts of
``tag.split("/")``. Every tag occurrence (rows in dataset order, tags within a row) walks its
titles from the top: a child is looked up among its parent's children *by title* (so siblings
with the same title are one node, the same title under two parents two nodes) and created when
missing, with the next id — ids follow the order of first sighting, the single top-level node is
0. Each occurrence adds 1 to every node on its path and 1 to the total (an occurrence without any
title, e.g. ``""``, adds to the total only). Nodes on no tag path do not exist.

``p(n) = count(n) / total`` is the share of tag occurrences through ``n`` (the raw lists hold
every accepted ancestor, so an ancestor tag counts itself as well). The published tree must have
exactly one top-level node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import polars as pl


@dataclass(frozen=True)
class FrequencyTree:
    """The frequency tree; node ``i`` has title ``titles[i]``, parent ``parents[i]`` (−1 for the
    root 0), depth ``depths[i]`` (root 0), full path ``paths[i]`` and ``counts[i]`` tag occurrences
    through it out of ``total``."""

    titles: tuple[str, ...]
    parents: np.ndarray
    depths: np.ndarray
    counts: np.ndarray
    total: int
    paths: tuple[str, ...]
    index: dict[str, int] = field(repr=False)

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.titles)

    @property
    def probabilities(self) -> np.ndarray:
        """``p(n) = count(n) / total`` (float64)."""
        return self.counts / self.total

    @cached_property
    def ancestors(self) -> np.ndarray:
        """(N, max depth + 1) int64: ``ancestors[n, d]`` = the ancestor of ``n`` at depth ``d``
        (``n`` itself at its own depth), −1 below ``n``."""
        out = np.full((self.n_nodes, int(self.depths.max()) + 1), -1, dtype=np.int64)
        for node in range(self.n_nodes):  # a parent always has a smaller id than its child
            parent = self.parents[node]
            if parent >= 0:
                out[node] = out[parent]
            out[node, self.depths[node]] = node
        return out

    def node_id(self, tag: str) -> int:
        """The node of a tag path, looked up as ``"/" + tag.strip("/")`` (as the published
        ``Tree.node_index_by_path``); KeyError naming the tag when there is none (published:
        −1, which then crashes the BMA kernel)."""
        key = "/" + tag.strip("/")
        if key not in self.index:
            raise KeyError(f"tag {tag!r} is not a path of the frequency tree")
        return self.index[key]

    def node_ids(self, tags: Iterable[str]) -> np.ndarray:
        """:meth:`node_id` of each tag, in the given order (repeats kept), int64."""
        return np.array([self.node_id(tag) for tag in tags], dtype=np.int64)


def build_frequency_tree(tag_rows: Iterable[Sequence[str] | None]) -> FrequencyTree:
    """The frequency tree of raw tag lists (module docstring); ``None`` rows are skipped.

    ValueError when there are no titled tags, or when there is more than one top-level node
    (the message names a tag under a second top-level title).
    """
    occurrences: dict[str, int] = {}  # insertion order = order of first sighting
    total = 0
    for tags in tag_rows:
        if tags is None:
            continue
        for tag in tags:
            occurrences[tag] = occurrences.get(tag, 0) + 1
            total += 1

    titles: list[str] = []
    parents: list[int] = []
    depths: list[int] = []
    counts: list[int] = []
    paths: list[str] = []
    children: dict[tuple[int, str], int] = {}
    for tag, times in occurrences.items():
        node = -1
        for title in tag.split("/"):
            if not title:
                continue
            child = children.get((node, title))
            if child is None:
                child = len(titles)
                children[(node, title)] = child
                titles.append(title)
                parents.append(node)
                depths.append(depths[node] + 1 if node >= 0 else 0)
                counts.append(0)
                paths.append(f"{paths[node] if node >= 0 else ''}/{title}")
                if node < 0 and child > 0:
                    raise ValueError(
                        f"the tag paths have more than one top-level node ({titles[0]!r} and "
                        f"{title!r}, e.g. in tag {tag!r}); exactly one is required"
                    )
            counts[child] += times
            node = child
    if not titles:
        raise ValueError("no tag path has a title: the frequency tree would be empty")
    return FrequencyTree(
        titles=tuple(titles),
        parents=np.array(parents, dtype=np.int64),
        depths=np.array(depths, dtype=np.int64),
        counts=np.array(counts, dtype=np.int64),
        total=total,
        paths=tuple(paths),
        index={path: node for node, path in enumerate(paths)},
    )


def tree_frame(tree: FrequencyTree, ic: np.ndarray) -> pl.DataFrame:
    """The tree as an ontology table: ``node_id`` (its path), ``name``, ``parent_ids`` (the
    parent's path; none for the root), ``node_index`` (first sighting), ``depth``, ``count``,
    ``total`` and the chosen ``ic``."""
    parent_ids = [[tree.paths[p]] if p >= 0 else [] for p in tree.parents.tolist()]
    return pl.DataFrame(
        {
            "node_id": list(tree.paths),
            "name": list(tree.titles),
            "parent_ids": parent_ids,
            "node_index": np.arange(tree.n_nodes, dtype=np.int64),
            "depth": tree.depths,
            "count": tree.counts,
            "total": np.full(tree.n_nodes, tree.total, dtype=np.int64),
            "ic": np.asarray(ic, dtype=np.float64),
        },
        schema_overrides={"parent_ids": pl.List(pl.String)},
    )


def tree_from_frame(frame: pl.DataFrame) -> FrequencyTree:
    """The :class:`FrequencyTree` of a :func:`tree_frame` table (row order free)."""
    frame = frame.sort("node_index")
    paths = frame["node_id"].to_list()
    index = {path: node for node, path in enumerate(paths)}
    parents = [index[p[0]] if p else -1 for p in frame["parent_ids"].to_list()]
    return FrequencyTree(
        titles=tuple(frame["name"].to_list()),
        parents=np.array(parents, dtype=np.int64),
        depths=frame["depth"].to_numpy().astype(np.int64),
        counts=frame["count"].to_numpy().astype(np.int64),
        total=int(frame["total"][0]) if frame.height else 0,
        paths=tuple(paths),
        index=index,
    )


def node_tree_paths(node_ids: Sequence[str], parent_ids: Sequence[Sequence[str]]) -> dict[str, str]:
    """Tag paths of an ontology given as a node file, when it is a tree (one root, at most one
    parent per node): ``/<root id>/…/<node id>``. ValueError naming a node with two parents."""
    parent = {}
    for node, parents in zip(node_ids, parent_ids, strict=True):
        if len(parents) > 1:
            raise ValueError(
                f"node {node!r} has {len(parents)} parents ({list(parents)[:3]}): the published "
                "construction needs a tree; give the topics as tag paths (ontology_source: "
                "tag_paths) or use method: platform"
            )
        parent[node] = parents[0] if parents else None
    paths: dict[str, str] = {}

    def path(node: str) -> str:
        if node not in paths:
            up = parent[node]
            paths[node] = f"/{node}" if up is None else f"{path(up)}/{node}"
        return paths[node]

    for node in node_ids:
        path(node)
    return paths
