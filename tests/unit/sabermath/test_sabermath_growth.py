"""A grown databank's pass (docs/scale.md, "Adding documents"): the old pass's totals, re-indexed,
plus a pass over the new pairs only equal a from-scratch pass bit for bit — histograms of both
signals, sure counts, band histograms, events — and the brute-force counts over the plain-Python
pair matrices (sabermath_reference.py), over several growth steps, any cut into units or
threads, and after a resume; the row digests tell exactly when the old pairs keep their values
(never under the corpus-frequency IC, under Seco IC while the tag tree keeps its nodes)."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
from test_sabermath_pair_kernel import (
    CORPORA,
    SETTINGS,
    around,
    brute_counts,
    pattern_counts,
    reference_matrices,
    scorer_of,
)

from saber_core.discovery.databank import tree_ic
from saber_core.discovery.pair_scorer import PairScorer
from saber_core.discovery.pass_totals import (
    Band,
    PassTotals,
    add_unit,
    resolve_counts,
    row_units,
    run_pass,
    unchanged_prefix,
    unit_pairs,
)
from saber_core.ontology.tag_paths import build_frequency_tree
from saber_core.signals.bma_published import bma_index
from saber_core.signals.jaccard_published import idea_tokens
from saber_core.signals.lin_published import LinSimilarity

FIELDS = ("hist_b", "hist_j", "counts", "band_b", "band_j")
STEPS = (5, 11, 12, 30, 44, 45, 45)  # rows after each growth step: one row, the last, none


def prefix_scorer(corpus, n: int, settings) -> PairScorer:
    """The scorer of the corpus's first ``n`` documents (the tree and its IC stay the same)."""
    tree_rows, docs, ideas = corpus
    return scorer_of((tree_rows, docs[:n], ideas[:n]), *settings)


def events_of(totals: PassTotals) -> list[tuple]:
    return sorted(map(tuple, totals.events.tolist()))


def assert_same_totals(got: PassTotals, expected: PassTotals) -> None:
    assert got.band == expected.band
    for name in FIELDS:
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert events_of(got) == events_of(expected)


@pytest.mark.parametrize("corpus", CORPORA[:3], ids=range(3))
@pytest.mark.parametrize("settings", SETTINGS[:2], ids=["published", "fixes"])
@pytest.mark.parametrize("kind", ["banded", "exact", "none"])
def test_growth_steps_add_up_to_a_from_scratch_pass_and_the_brute_force(corpus, settings, kind):
    bma, jac = reference_matrices(corpus, *settings)
    t_bma, t_jac = float(np.median(bma)), float(np.median(jac))
    band = {
        "banded": around(t_bma, t_jac, 40, 40),  # wide: many pairs in the bands, some events
        "exact": Band.exact(t_bma, t_jac),
        "none": Band.none(),
    }[kind]
    totals, digests, n_old = PassTotals.empty(0, band), np.zeros((0, 16), np.uint8), 0
    for step, n in enumerate(STEPS):
        scorer = prefix_scorer(corpus, n, settings)
        assert unchanged_prefix(digests, scorer.row_digests) == n_old  # the old rows score alike
        units = row_units(n, 1 + step % 3, n_old)
        grown = totals.grown(n)
        new = run_pass(scorer.arrays, units, band, workers=1 + step % 2, prefix=n_old)
        assert new.units_done == set(range(len(units)))
        grown.add(new)
        scratch = run_pass(scorer.arrays, row_units(n, 4), band)
        assert_same_totals(grown, scratch)
        assert np.array_equal(grown.hist_b, pattern_counts(bma[:n, :n]))  # every ordered pair
        assert np.array_equal(grown.hist_j, pattern_counts(jac[:n, :n]))
        if kind != "none":
            expected = brute_counts(bma[:n, :n], jac[:n, :n], t_bma, t_jac)
            assert resolve_counts(grown, t_bma, t_jac).tolist() == expected
        totals, digests, n_old = grown, scorer.row_digests, n
    if kind == "banded":
        assert len(totals.events) > 0  # pairs with both signals inside their bands


def test_a_grown_pass_resumed_from_whole_units_gives_the_same_totals():
    settings = SETTINGS[0]
    old, new = prefix_scorer(CORPORA[1], 20, settings), prefix_scorer(CORPORA[1], 45, settings)
    band = around(0.3, 0.2, 40, 40)
    base = run_pass(old.arrays, row_units(20, 3), band).grown(45)
    units = row_units(45, 6, 20)
    assert len(units) == 6
    saved = []
    keep = lambda totals: saved.append(copy.deepcopy(totals))  # noqa: E731
    run_pass(new.arrays, units, band, only=[0, 4], after_unit=keep, prefix=20)  # killed after
    resumed = saved[0]  # the checkpoint holds unit 0 only
    done = []
    rest = run_pass(
        new.arrays, units, band, skip=resumed.units_done, workers=2, prefix=20,
        progress=lambda d, t: done.append((d, t)),
    )  # fmt: skip
    resumed.add(rest)
    assert resumed.units_done == set(range(6))
    pairs = sum(unit_pairs(45, units[u], 20) for u in range(1, 6))
    assert done[-1] == (pairs, pairs)
    base.add(resumed)
    assert_same_totals(base, run_pass(new.arrays, row_units(45, 5), band))


def test_units_over_appended_rows_cover_them_with_balanced_pairs():
    units = row_units(3000, 8, 2000)
    assert units[0][0] == 2000 and units[-1][1] == 3000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(units))
    pairs = [unit_pairs(3000, u, 2000) for u in units]
    assert max(pairs) / min(pairs) < 1.05
    # every unordered pair with a new row, once: old × new plus new × new (self-pairs too)
    assert sum(pairs) == 2000 * 1000 + 1000 * 1001 // 2
    assert row_units(10, 4, 10) == [] and row_units(12, 5, 10) == [(10, 11), (11, 12)]
    assert row_units(1000, 8) == row_units(1000, 8, 0)


def test_a_grown_pass_refuses_rows_it_would_count_twice():
    scorer = prefix_scorer(CORPORA[0], 45, SETTINGS[0])
    totals = PassTotals.empty(45, Band.exact(0.5, 0.5))
    with pytest.raises(ValueError, match=r"unit \(10, 20\) is not a row range .* prefix 15"):
        add_unit(scorer.arrays, (10, 20), totals, prefix=15)
    with pytest.raises(ValueError, match="is not a row range of the 45 rows"):
        add_unit(scorer.arrays, (40, 46), totals)  # past the last row: never a wild write
    with pytest.raises(ValueError, match="cannot grow totals of 45 rows to 44"):
        totals.grown(44)


# ------------------------------------------------------------------------ when growth is exact
LEAVES = ["/M/A/B", "/M/A/C", "/M/A/B/D", "/M/E", "/M/E/F", "/M/E/G/H", "/M/A/B-C"]
WORDS = ["prime", "bound", "graph", "mod", "sum", "root", "the", "parity"]


def tag_docs(n: int, seed: int, leaves=LEAVES) -> tuple[list[list[str]], list[str]]:
    """Raw tag lists (every ancestor below the root listed, as a tagger emits them) and ideas."""
    rng = np.random.default_rng(seed)
    docs, ideas = [], []
    for _ in range(n):
        raw = []
        for leaf in rng.choice(leaves, min(len(leaves), rng.integers(1, 4)), replace=False):
            parts = leaf.split("/")
            raw += ["/".join(parts[:k]) for k in range(3, len(parts) + 1)]
        docs.append(list(dict.fromkeys(raw)))
        ideas.append(" ".join(rng.choice(WORDS, rng.integers(1, 6))))
    return docs, ideas


def corpus_scorer(docs, ideas, ic: str, pooled: bool = True) -> PairScorer:
    """The scorer the published construction builds: the tag tree of the corpus, its IC."""
    tree = build_frequency_tree(docs)
    lin = LinSimilarity(ic=tree_ic(tree, ic), ancestors=tree.ancestors)
    nodes = [tree.node_ids(tags) for tags in docs]
    return PairScorer(bma_index(lin, nodes), idea_tokens(ideas), pooled)


def test_row_digests_say_exactly_when_the_old_pairs_keep_their_values():
    docs, ideas = tag_docs(60, seed=1)
    more, more_ideas = tag_docs(8, seed=2)  # the same tag nodes, new words too
    more_ideas[0] += " telescoping"
    old = {ic: corpus_scorer(docs, ideas, ic).row_digests for ic in ("seco", "corpus_frequency")}
    grown_docs, grown_ideas = docs + more, ideas + more_ideas
    seco = corpus_scorer(grown_docs, grown_ideas, "seco")
    assert unchanged_prefix(old["seco"], seco.row_digests) == 60  # Seco IC: the tree's shape
    frequency = corpus_scorer(grown_docs, grown_ideas, "corpus_frequency")
    changed = (old["corpus_frequency"] != frequency.row_digests[:60]).any(axis=1)
    assert changed.all()  # every IC moved: every BMA may, so no old row is kept
    # and the values agree with the digests: Seco rows unchanged, frequency rows changed
    rows = np.arange(60)
    before = corpus_scorer(docs, ideas, "seco").rows(rows)
    after = seco.rows(rows)
    for a, b in zip(before, after, strict=True):
        assert np.array_equal(a.view(np.uint16), b[:, :60].view(np.uint16))
    freq_before = corpus_scorer(docs, ideas, "corpus_frequency").rows(rows)[0]
    assert not np.array_equal(freq_before, frequency.rows(rows)[0][:, :60])
    # a new tag node changes the Seco IC of every node: no old row is kept
    new_node, _ = tag_docs(1, seed=3, leaves=["/M/E/G/K"])
    grown = corpus_scorer(docs + new_node, [*ideas, "sum"], "seco")
    assert unchanged_prefix(old["seco"], grown.row_digests) == 0
    # an edited idea stops the prefix at its row; another BMA variant changes every row
    edited = corpus_scorer(docs, [*ideas[:7], "graph colouring", *ideas[8:]], "seco")
    assert unchanged_prefix(old["seco"], edited.row_digests) == 7
    mean = corpus_scorer(docs, ideas, "seco", pooled=False)
    assert unchanged_prefix(old["seco"], mean.row_digests) == 0
    # equal digests, equal rows (duplicates of one tag list and idea)
    same = corpus_scorer([docs[0], docs[0]], [ideas[0], ideas[0]], "seco").row_digests
    assert np.array_equal(same[0], same[1])
