"""docs/sabermath.md §4: Lin and §5 BMA against plain-Python references (sabermath_reference.py):
exact float64
Lin, bit-exact float16 BMA."""

from __future__ import annotations

import numpy as np
import pytest
import sabermath_reference as ref

from saber_core.ontology.tag_paths import build_frequency_tree
from saber_core.signals.bma_published import bma_block, bma_index
from saber_core.signals.lin_published import lin_similarity

TITLES = ("A", "B", "C", "B-C", "D")


def random_rows(seed: int, n_rows: int = 80, prefix: str = "/M", depth: int = 5) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    return [
        [
            prefix + "".join("/" + str(rng.choice(TITLES)) for _ in range(rng.integers(0, depth)))
            for _ in range(rng.integers(1, 5))
        ]
        for _ in range(n_rows)
    ]


def random_docs(seed: int, n_nodes: int, n_docs: int = 40) -> list[list[int]]:
    """Tag lists (node ids, list order, repeats allowed), some empty, some duplicated."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, n_nodes, rng.integers(0, 6)).tolist() for _ in range(n_docs)]
    docs[3] = []
    docs[5] = list(docs[4])
    return docs


TREES = [random_rows(seed) for seed in range(3)] + [
    random_rows(7, prefix="/M/A"),  # every tag passes through A: IC(A) = 0 below the root
    random_rows(8, n_rows=300, depth=7),  # a deeper tree of a few hundred nodes
    [["/M"], ["/M"]],  # a single node
]


# --------------------------------------------------------------------------------- §4
@pytest.mark.parametrize("rows", TREES)
@pytest.mark.parametrize("root_fix", [False, True])
def test_lin_matrix_equals_the_path_prefix_reference(rows, root_fix):
    nodes, total = ref.frequency_tree(rows)
    lin = lin_similarity(build_frequency_tree(rows), root_self_similarity=root_fix)
    expected = ref.lin_matrix(nodes, total, root_fix=root_fix)
    assert np.array_equal(lin.matrix(), expected)
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, lin.n_nodes, (2, 50))
    assert np.array_equal(lin.pairs(a, b), expected[a, b])
    cols = rng.integers(0, lin.n_nodes, 7)
    assert np.array_equal(lin.rows(a[:5], cols), expected[np.ix_(a[:5], cols)])


def test_diagonal_is_zero_at_the_root_and_below_one_elsewhere_unless_fixed():
    rows = TREES[0]
    published = lin_similarity(build_frequency_tree(rows)).matrix()
    fixed = lin_similarity(build_frequency_tree(rows), root_self_similarity=True).matrix()
    diagonal = np.diag(published)
    assert diagonal[0] == 0.0
    assert np.all((diagonal[1:] > 1 - 1e-12) & (diagonal[1:] < 1.0))
    assert np.all(np.diag(fixed) == 1.0)
    off = ~np.eye(len(fixed), dtype=bool)
    assert np.array_equal(fixed[off], published[off])  # the fix only touches the diagonal
    assert np.all(published[0, 1:] == 0.0)  # LCA = root


def test_lca_is_the_longest_common_path_prefix():
    tree = build_frequency_tree([["/M/A/B/C", "/M/A/D", "/M/E"]])
    lin = lin_similarity(tree)
    ids = {path: i for i, path in enumerate(tree.paths)}
    pairs = [
        ("/M/A/B/C", "/M/A/D", "/M/A"),
        ("/M/A/B/C", "/M/A/B", "/M/A/B"),
        ("/M/E", "/M/A", "/M"),
    ]
    for x, y, lca in pairs:
        assert lin.lca(ids[x], ids[y]) == ids[lca]


# --------------------------------------------------------------------------------- §5
@pytest.mark.parametrize("tree_rows", TREES[:5])
@pytest.mark.parametrize("root_fix", [False, True])
def test_bma_block_is_bit_identical_to_the_reference(tree_rows, root_fix):
    nodes, total = ref.frequency_tree(tree_rows)
    matrix = ref.lin_matrix(nodes, total, root_fix=root_fix)
    lin = lin_similarity(build_frequency_tree(tree_rows), root_self_similarity=root_fix)
    docs = random_docs(len(tree_rows), lin.n_nodes)
    exact = np.array([[ref.bma(matrix, a, b) for b in docs] for a in docs])
    index = bma_index(lin, docs)
    before_storage = bma_block(index, np.arange(len(docs)), dtype=np.float64)
    assert np.array_equal(before_storage.view(np.uint64), exact.view(np.uint64))  # float order
    got = bma_block(index, np.arange(len(docs)))
    assert got.dtype == np.float16
    assert np.array_equal(got.view(np.uint16), exact.astype(np.float16).view(np.uint16))
    # any block of rows, in any order and chunking, gives the same rows
    rows = np.array([7, 3, 3, 0, 20, 5])
    assert np.array_equal(bma_block(index, rows, row_chunk=1), got[rows])


def test_bma_of_empty_lists_is_zero_and_self_pairs_are_close_to_one():
    tree_rows = TREES[0]
    lin = lin_similarity(build_frequency_tree(tree_rows))
    deep = int(np.argmax(lin.ic))
    docs = [[], [deep], [deep, deep], [0]]
    got = bma_block(bma_index(lin, docs), np.arange(4)).astype(np.float64)
    assert np.all(got[0] == 0.0) and np.all(got[:, 0] == 0.0)
    assert got[1, 1] == got[2, 2] == got[1, 2] == 1.0  # ≈ 1 − 1e-13 rounds to 1 in float16
    assert got[3, 3] == 0.0  # the root's published self-similarity
    fixed = lin_similarity(build_frequency_tree(tree_rows), root_self_similarity=True)
    assert bma_block(bma_index(fixed, docs), np.array([3]))[0, 3] == 1.0


def test_bma_is_the_pooled_form_not_the_mean_of_means():
    tree = build_frequency_tree([["/M/A/B"] * 3 + ["/M/A/C", "/M/D"]])
    lin = lin_similarity(tree)
    a, b, c, d = (tree.node_id(p) for p in ("/M/A/B", "/M/A/C", "/M/D", "/M/A"))
    matrix = lin.matrix()
    docs = [[a], [b, c, d]]
    half_a = max(matrix[a, b], matrix[a, c], matrix[a, d])
    half_b = matrix[b, a] + matrix[c, a] + matrix[d, a]
    pooled = half_a / 4 + half_b / 4
    got = float(bma_block(bma_index(lin, docs), np.array([0]))[0, 1])
    assert got == float(np.float16(pooled))
    mean_of_means = 0.5 * (half_a + half_b / 3)
    assert np.float16(pooled) != np.float16(mean_of_means)


def test_bma_index_rejects_node_ids_outside_the_tree():
    lin = lin_similarity(build_frequency_tree([["/M/A"]]))
    with pytest.raises(ValueError, match=r"document 2: node id 5"):
        bma_index(lin, [[0], [1, 0], [0, 1, 5]])
