"""docs/sabermath.md §1: frequency tree, §2 tag clean-up and §3 information content against
plain-Python
references (sabermath_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
import sabermath_reference as ref

from saber_core.ontology.tag_cleanup import clean_databank, clean_tags
from saber_core.ontology.tag_paths import build_frequency_tree
from saber_core.signals.lin_published import information_content

TITLES = ("Algebra", "Geometry", "X", "X-Y", "X Y", "Y", "Z-", "Lemma")


def random_tag(rng: np.random.Generator) -> str:
    """A tagger-like path under /Mathematics, sometimes with an odd spelling."""
    path = "/Mathematics" + "".join(
        "/" + str(rng.choice(TITLES)) for _ in range(int(rng.integers(0, 5)))
    )
    odd = rng.random()
    if odd < 0.05:
        return path + "/"
    if odd < 0.08:
        return path.replace("/", "//", 2)
    if odd < 0.10:
        return path.lstrip("/")
    if odd < 0.12:
        return ""
    return path


def random_rows(rng: np.random.Generator, n_rows: int) -> list[list[str] | None]:
    return [
        None if rng.random() < 0.05 else [random_tag(rng) for _ in range(rng.integers(0, 7))]
        for _ in range(n_rows)
    ]


# ------------------------------------------------------------------------------ §1 and §3
@pytest.mark.parametrize("seed", range(6))
def test_frequency_tree_ids_counts_and_ic_equal_the_reference(seed):
    rows = random_rows(np.random.default_rng(seed), 120)
    nodes, total = ref.frequency_tree(rows)
    tree = build_frequency_tree(rows)
    ic = information_content(tree.probabilities)
    assert tree.total == total
    assert tree.n_nodes == len(nodes)
    for path, (idx, count) in nodes.items():
        assert tree.index[path] == idx, path
        assert tree.paths[idx] == path
        assert tree.counts[idx] == count, path
        assert tree.probabilities[idx] == count / total
        assert ic[idx] == ref.information_content(count, total), path  # bit-exact
    assert nodes["/Mathematics"][0] == 0


def test_ids_follow_first_sighting_and_empty_tags_count_in_the_total():
    rows = [["/M/B/C", "/M/A"], None, ["", "/M/A/C", "M//B/"]]
    tree = build_frequency_tree(rows)
    assert tree.paths == ("/M", "/M/B", "/M/B/C", "/M/A", "/M/A/C")
    assert tree.counts.tolist() == [4, 2, 1, 2, 1]
    assert tree.total == 5  # the empty tag counts: p(root) = 4/5
    assert tree.parents.tolist() == [-1, 0, 1, 0, 3]
    assert tree.depths.tolist() == [0, 1, 2, 1, 2]
    assert tree.ancestors.tolist() == [[0, -1, -1], [0, 1, -1], [0, 1, 2], [0, 3, -1], [0, 3, 4]]


def test_same_titled_siblings_collapse_and_same_title_elsewhere_is_another_node():
    tree = build_frequency_tree([["/M/X/Z", "/M/Y/Z", "/M/X/Z"]])
    assert tree.paths == ("/M", "/M/X", "/M/X/Z", "/M/Y", "/M/Y/Z")
    assert tree.counts.tolist() == [3, 2, 2, 1, 1]


def test_more_than_one_top_level_node_is_an_error_naming_a_tag():
    with pytest.raises(ValueError, match=r"'Other'.*'/Other/X'"):
        build_frequency_tree([["/M/A"], ["/Other/X"]])
    with pytest.raises(ValueError, match="empty"):
        build_frequency_tree([["", "/"], None])


def test_node_lookup_strips_slashes_like_the_published_tree():
    tree = build_frequency_tree([["/M/A/B"]])
    assert tree.node_id("M/A/B/") == tree.node_id("/M/A/B") == 2
    assert tree.node_ids(["/M", "/M/A/B", "/M"]).tolist() == [0, 2, 0]
    with pytest.raises(KeyError, match="/M//A"):
        tree.node_id("/M//A")  # the path index is built from titles; "//" is not found


# -------------------------------------------------------------------------------- §2
@pytest.mark.parametrize("seed", range(4))
def test_clean_tags_equals_the_reference_on_random_sets(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(300):
        tags = [random_tag(rng) for _ in range(rng.integers(0, 9))]
        assert clean_tags(tags) == ref.clean_published(tags)
        assert clean_tags(tags, ancestor_check=True) == ref.clean_fixed(tags)


def test_sibling_with_a_dash_hides_the_ancestor_from_the_published_check_only():
    tags = ["/M/X/Z", "/M/X", "/M/X-Y", "/M/X"]
    # sorted: /M/X, /M/X-Y, /M/X/Z ('-' < '/'): the successor of /M/X is not its child
    assert clean_tags(tags) == ["/M/X", "/M/X-Y", "/M/X/Z"]
    assert clean_tags(tags, ancestor_check=True) == ["/M/X-Y", "/M/X/Z"]
    # without the sibling both rules drop the ancestors
    assert clean_tags(["/M", "/M/X", "/M/X/Z"]) == ["/M/X/Z"]
    assert clean_tags(["/M", "/M/X", "/M/X/Z"], ancestor_check=True) == ["/M/X/Z"]


def test_clean_databank_drops_empty_tag_lists_and_blank_ideas():
    rows = [["/M/A", "/M"], [], ["/M/B"], ["/M/C"], ["/M/D"]]
    ideas = ["use A", "x", "  \n", None, "d"]
    kept, tags = clean_databank(rows, ideas)
    assert kept.tolist() == [0, 4]
    assert tags == [["/M/A"], ["/M/D"]]
    with pytest.raises(ValueError, match="pair by position"):
        clean_databank(rows, ideas[:2])
