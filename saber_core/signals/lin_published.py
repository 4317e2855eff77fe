"""docs/sabermath.md §3: information content and §4 Lin similarity on the frequency tree
(``build_benchmark/similarities/node_similarities/{metrics.py,node_similarities.py}``).

* ``IC(n) = −ln(max(p(n), 1e-12))`` with ``p`` the corpus frequency of :mod:`.frequency_tree`
  (natural log, numpy's ``np.log`` as the published ``informational_content``; the root has
  p = 1, IC 0).
* ``Lin(a, b) = 2·IC(m) / (IC(a) + IC(b) + 1e-12)`` with ``m`` the lowest common ancestor (the
  longest common path prefix; IC never decreases going down, so it is also the MICA). Evaluated
  left to right as ``(2·IC(m)) / ((IC(a) + IC(b)) + 1e-12)``.
* The published diagonal is the same formula, ``2IC/(2IC + 1e-12)``: ≈ 1 − 1e-13 for ordinary
  nodes and 0 for the root (any node with p = 1). Fix ``root_self_similarity``: 1.0 on the whole
  diagonal. Pairs whose LCA is the root get 0.

The LCA comes from the ancestor-by-depth array of the tree (two nodes share their ancestors down
to the LCA and differ below), so rows of the similarity are computed without a dense N × N
matrix; :meth:`LinSimilarity.matrix` gives the dense form for small trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from saber_core.ontology.tag_paths import FrequencyTree

IC_FLOOR = 1e-12  # metrics.informational_content eps
LIN_EPS = 1e-12  # metrics.lin_similarity eps


def information_content(probabilities: np.ndarray) -> np.ndarray:
    """``IC = −ln(max(p, 1e-12))`` elementwise (float64)."""
    return -np.log(np.maximum(np.asarray(probabilities, dtype=np.float64), IC_FLOOR))


@dataclass(frozen=True)
class LinSimilarity:
    """Lin similarity between the nodes of a frequency tree (module docstring).

    ``ic`` (N,) information content; ``ancestors`` (N, D) ancestor at each depth, −1 below the
    node; ``root_self_similarity`` the §4 fix (diagonal 1.0).
    """

    ic: np.ndarray
    ancestors: np.ndarray
    root_self_similarity: bool = False

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.ic)

    def lca(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Lowest common ancestor of ``a[k]`` and ``b[k]`` (broadcast), int64."""
        a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
        anc_a, anc_b = self.ancestors[a], self.ancestors[b]
        common = np.logical_and.accumulate((anc_a == anc_b) & (anc_a >= 0), axis=-1)
        return np.take_along_axis(anc_a, common.sum(axis=-1, keepdims=True) - 1, axis=-1)[..., 0]

    def _value(self, a: np.ndarray, b: np.ndarray, lca: np.ndarray) -> np.ndarray:
        lin = (2.0 * self.ic[lca]) / ((self.ic[a] + self.ic[b]) + LIN_EPS)
        if self.root_self_similarity:
            lin = np.where(a == b, 1.0, lin)
        return lin

    def pairs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``Lin(a[k], b[k])`` (broadcast), float64."""
        a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
        return self._value(a, b, self.lca(a, b))

    def rows(self, rows: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
        """``Lin(rows[i], columns[j])``, (R, C) float64; ``columns`` default: every node.

        The LCA depth is counted depth by depth (a running "still equal" mask), so memory stays
        at a few (R, C) arrays.
        """
        rows = np.asarray(rows, dtype=np.int64)
        columns = np.arange(self.n_nodes) if columns is None else np.asarray(columns, np.int64)
        anc_r, anc_c = self.ancestors[rows], self.ancestors[columns]
        equal = np.ones((len(rows), len(columns)), dtype=bool)
        lca = np.zeros((len(rows), len(columns)), dtype=np.int64)
        for depth in range(self.ancestors.shape[1]):
            row_ancestor = anc_r[:, depth][:, None]
            equal &= (row_ancestor == anc_c[:, depth][None, :]) & (row_ancestor >= 0)
            if not equal.any():
                break
            np.copyto(lca, row_ancestor, where=equal)
        return self._value(rows[:, None], columns[None, :], lca)

    def matrix(self) -> np.ndarray:
        """The dense N × N similarity (the published ``tree_lin_sim.npy``); small trees only."""
        return self.rows(np.arange(self.n_nodes))


def lin_similarity(tree: FrequencyTree, *, root_self_similarity: bool = False) -> LinSimilarity:
    """The Lin similarity of a frequency tree, IC from its corpus frequencies."""
    return LinSimilarity(
        ic=information_content(tree.probabilities),
        ancestors=tree.ancestors,
        root_self_similarity=root_self_similarity,
    )
