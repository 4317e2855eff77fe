"""Topic ontology of a node file (platform): a validated DAG, Seco intrinsic IC, ancestor sets.

The ontology is a frame with one row per node (the file format is documented in
``saber_core.inputs.formats``): ``node_id`` (unique, non-empty string), ``name`` and
``parent_ids`` (a list of node ids; empty for a root). A node may have several parents. If
several roots exist, a virtual root ``VIRTUAL_ROOT`` is added above them so that every pair of
nodes has a common ancestor.

Seco intrinsic information content (a node counts as its own ancestor and is not its own
descendant): ``IC(n) = 1 − log(desc(n) + 1) / log(N)``, with ``desc(n)`` the number of distinct
descendants of ``n`` and ``N`` the number of nodes. Leaves have IC 1, the root 0. Lin and BMA
on this DAG: :mod:`saber_core.signals.lin_bma`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import numpy as np
import polars as pl
import scipy.sparse as sp

from saber_core.errors import InputError

VIRTUAL_ROOT = "__root__"


class OntologyError(InputError):
    """The ontology frame is not a valid DAG; the message names the offending node ids."""

    default_fix = (
        "correct the ontology file (inputs.ontology, SABER_ONTOLOGY); its format: docs/data.md"
        "#inputs"
    )


@dataclass(frozen=True)
class Ontology:
    """A validated topic DAG with precomputed IC and ancestor sets (all indices are row indices)."""

    node_ids: np.ndarray  # (N,) object: node id per index
    names: np.ndarray  # (N,) object
    parent_ptr: np.ndarray  # (N+1,) CSR pointers into parent_idx
    parent_idx: np.ndarray  # parent indices
    ancestors: sp.csr_matrix  # (N, N) bool: ancestors[m, a] = a is an ancestor-or-self of m
    ic: np.ndarray  # (N,) float64 Seco IC
    root: int
    virtual_root_added: bool
    index: dict[str, int] = field(repr=False)

    @property
    def n_nodes(self) -> int:
        """Number of nodes, virtual root included."""
        return len(self.node_ids)

    def indices(self, node_ids: Iterable[str]) -> np.ndarray:
        """Map node ids to row indices; raises KeyError naming the first unknown id."""
        out = []
        for node in node_ids:
            if node not in self.index:
                raise KeyError(f"topic id {node!r} is not a node of the ontology")
            out.append(self.index[node])
        return np.asarray(out, dtype=np.int64)

    def parents_of(self, i: int) -> np.ndarray:
        """Row indices of the parents of node ``i``."""
        return self.parent_idx[self.parent_ptr[i] : self.parent_ptr[i + 1]]

    def ancestor_set(self, i: int) -> np.ndarray:
        """Row indices of the ancestors of node ``i`` (itself included)."""
        return self.ancestors.indices[self.ancestors.indptr[i] : self.ancestors.indptr[i + 1]]

    @cached_property
    def descendants(self) -> sp.csr_matrix:
        """(N, N) bool: ``descendants[a, m]`` = m is a descendant-or-self of a (ancestorsᵀ)."""
        closure = self.ancestors.T.tocsr()
        closure.sort_indices()
        return closure

    def descendant_counts(self) -> np.ndarray:
        """desc(n) for every node: the number of distinct proper descendants."""
        return np.asarray(self.ancestors.sum(axis=0)).ravel().astype(np.int64) - 1

    def to_frame(self) -> pl.DataFrame:
        """One row per node: node_id, name, parent_ids, ic, depth (longest path from the root)."""
        parents = [[str(self.node_ids[p]) for p in self.parents_of(i)] for i in range(self.n_nodes)]
        return pl.DataFrame(
            {
                "node_id": self.node_ids.astype(str),
                "name": self.names.astype(str),
                "parent_ids": parents,
                "ic": self.ic,
                "depth": _depths(self),
            },
            schema_overrides={"parent_ids": pl.List(pl.String)},
        )


def build_ontology(frame: pl.DataFrame) -> Ontology:
    """Validate an ontology frame (node_id, name, parent_ids) and precompute IC and ancestors.

    Raises OntologyError for a missing column, an empty or duplicate node id, an unknown parent id
    or a cycle; each message names the offending rows or node ids. Several roots get a virtual
    root above them.
    """
    missing = {"node_id", "parent_ids"} - set(frame.columns)
    if missing:
        raise OntologyError(f"ontology is missing column(s) {sorted(missing)}")
    if frame.height == 0:
        raise OntologyError("ontology has no nodes")
    node_ids = [None if v is None else str(v).strip() for v in frame["node_id"].to_list()]
    names = frame["name"].to_list() if "name" in frame.columns else node_ids
    parent_lists = [list(p or []) for p in frame["parent_ids"].to_list()]

    bad_rows = [row for row, node in enumerate(node_ids) if not node]
    if bad_rows:
        raise OntologyError(f"ontology rows {bad_rows[:20]} have an empty node_id")
    seen: dict[str, int] = {}
    duplicates: dict[str, list[int]] = {}
    for row, node in enumerate(node_ids):
        if node in seen:
            duplicates.setdefault(node, [seen[node]]).append(row)
        seen[node] = row
    if duplicates:
        detail = "; ".join(f"{k!r} at rows {v}" for k, v in list(duplicates.items())[:20])
        raise OntologyError(f"duplicate node_id(s): {detail}")
    unknown = [
        (node, str(p))
        for node, parents in zip(node_ids, parent_lists, strict=True)
        for p in parents
        if str(p) not in seen
    ]
    if unknown:
        detail = "; ".join(f"node {n!r} has parent {p!r}" for n, p in unknown[:20])
        raise OntologyError(f"unknown parent id(s): {detail}")

    index = {node: i for i, node in enumerate(node_ids)}
    edges = [
        (index[str(p)], child)
        for child, parents in enumerate(parent_lists)
        for p in dict.fromkeys(parents)
    ]
    _raise_on_cycle(edges, node_ids)

    roots = [i for i, parents in enumerate(parent_lists) if not parents]
    virtual = len(roots) > 1
    if virtual:
        if VIRTUAL_ROOT in index:
            raise OntologyError(f"node id {VIRTUAL_ROOT!r} is reserved for the virtual root")
        root = len(node_ids)
        index[VIRTUAL_ROOT] = root
        node_ids.append(VIRTUAL_ROOT)
        names.append("(virtual root)")
        edges.extend((root, r) for r in roots)
    else:
        root = roots[0]

    n = len(node_ids)
    parent_matrix = sp.csr_matrix(
        (np.ones(len(edges), dtype=bool), ([c for _, c in edges], [p for p, _ in edges])),
        shape=(n, n),
    )
    ancestors = _ancestor_closure(parent_matrix)
    desc = np.asarray(ancestors.sum(axis=0)).ravel() - 1
    ic = seco_ic(desc, n)
    return Ontology(
        node_ids=np.asarray(node_ids, dtype=object),
        names=np.asarray([str(x) if x is not None else "" for x in names], dtype=object),
        parent_ptr=parent_matrix.indptr.astype(np.int64),
        parent_idx=parent_matrix.indices.astype(np.int64),
        ancestors=ancestors,
        ic=ic,
        root=root,
        virtual_root_added=virtual,
        index=index,
    )


def seco_ic(descendants: np.ndarray, n_nodes: int) -> np.ndarray:
    """Seco intrinsic IC: ``IC(n) = 1 − log(desc(n) + 1) / log(N)`` (a one-node ontology: IC 1)."""
    descendants = np.asarray(descendants, dtype=np.float64)
    if n_nodes <= 1:
        return np.ones_like(descendants)
    return 1.0 - np.log(descendants + 1.0) / np.log(n_nodes)


def _is_acyclic(edges: list[tuple[int, int]], n_nodes: int) -> bool:
    """Kahn's algorithm level by level, vectorized: peel nodes without remaining parents.

    The graph is acyclic iff every node gets peeled; one numpy step per DAG level.
    """
    if not edges:
        return True
    pairs = np.asarray(edges, dtype=np.int64)
    parent, child = pairs[:, 0], pairs[:, 1]
    order = np.argsort(parent, kind="stable")
    children = child[order]
    ptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(parent, minlength=n_nodes), out=ptr[1:])
    remaining = np.bincount(child, minlength=n_nodes)
    frontier = np.flatnonzero(remaining == 0)
    peeled = 0
    while frontier.size:
        peeled += frontier.size
        counts = ptr[frontier + 1] - ptr[frontier]
        kids = children[concat_ranges(ptr[frontier], counts)]
        remaining -= np.bincount(kids, minlength=n_nodes)
        frontier = np.unique(kids[remaining[kids] == 0])
    return peeled == n_nodes


def _raise_on_cycle(edges: list[tuple[int, int]], node_ids: Sequence[str]) -> None:
    if _is_acyclic(edges, len(node_ids)):
        return
    graph = nx.DiGraph(edges)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    ids = [node_ids[u] for u, _ in cycle]
    raise OntologyError(f"ontology has a cycle through node ids {ids}")


def _ancestor_closure(parent_matrix: sp.csr_matrix) -> sp.csr_matrix:
    """Reflexive-transitive closure of the child→parent relation by repeated sparse products.

    Iterates ``A ← I ∨ P·A`` until it stops growing (at most the DAG's depth + 1 products).
    """
    n = parent_matrix.shape[0]
    eye = sp.identity(n, dtype=np.int32, format="csr")
    p = parent_matrix.astype(np.int32)
    closure = eye.copy()
    while True:
        grown = ((eye + p @ closure) > 0).astype(np.int32).tocsr()
        if grown.nnz == closure.nnz:
            break
        closure = grown
    closure = closure.astype(bool).tocsr()
    closure.sort_indices()
    return closure


def _depths(ontology: Ontology) -> np.ndarray:
    """Longest distance from the root for every node (proper ancestors' count on that path)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(ontology.n_nodes))
    for child in range(ontology.n_nodes):
        graph.add_edges_from((int(p), child) for p in ontology.parents_of(child))
    depth = np.zeros(ontology.n_nodes, dtype=np.int64)
    for node in nx.topological_sort(graph):
        for child in graph.successors(node):
            depth[child] = max(depth[child], depth[node] + 1)
    return depth


def concat_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every (s, c) pair, without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return offsets + np.arange(total)
