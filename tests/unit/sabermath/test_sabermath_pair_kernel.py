"""The compiled all-pairs kernel against the plain-Python references (sabermath_reference.py):
float16 storage as numpy casts, both signals bit-identical for every pair, and the passes
(histograms, group counts) equal to brute-force counts over the full matrices under any cut of
the rows into units, any number of threads, and after a resume."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import sabermath_reference as ref
from test_sabermath_jaccard import REFERENCE_STOP_WORDS
from test_sabermath_lin_bma import TREES

from saber_core.discovery.global_threshold import histogram_threshold
from saber_core.discovery.pair_kernel import PAD_WIDTH, float16_bits
from saber_core.discovery.pair_scorer import PairScorer, row_counts
from saber_core.discovery.pass_totals import (
    Band,
    pass_key,
    resolve_counts,
    row_units,
    run_pass,
    sample_band,
    sample_histograms,
    sample_rows,
    threshold_bits,
)
from saber_core.ontology.tag_paths import build_frequency_tree
from saber_core.signals.bma_published import bma_index
from saber_core.signals.jaccard_published import idea_tokens
from saber_core.signals.lin_published import lin_similarity

WORDS = ["x^2", "a_n", "sum", "the", "and", "bound", "prime", "so", "2", "mod", "graph", "root"]


# ------------------------------------------------------------------------ float16 storage
def test_float16_bits_round_like_numpy_at_every_float16_midpoint():
    patterns = np.arange(0x7C00, dtype=np.uint16)  # every finite non-negative float16
    values = patterns.view(np.float16).astype(np.float64)
    midpoints = (values[:-1] + values[1:]) / 2  # exact in float64: ties to even
    rng = np.random.default_rng(0)
    probes = np.concatenate(
        [
            values,
            midpoints,
            np.nextafter(midpoints, 0.0),
            np.nextafter(midpoints, 1.0),
            -midpoints[::7],
            [0.0, -0.0, 2.0**-25, 2.0**-26, 3 * 2.0**-26, 65504.0, 65519.99, 65520.0, 1e300],
            rng.uniform(0, 1, 100_000),
            rng.uniform(0, 1e-4, 10_000),
        ]
    )
    got = np.empty(len(probes), dtype=np.uint16)
    float16_bits(probes.view(np.int64), got)
    with np.errstate(over="ignore"):
        expected = probes.astype(np.float16).view(np.uint16)
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, [(probes[i], got[i], expected[i]) for i in bad[:5]]


# ------------------------------------------------------------------------ both signals
def random_corpus(seed: int, tree_rows, n_docs: int = 45):
    """Tag lists (node ids, list order, repeats; lengths 0 to 11, past the padded width, some
    empty) and ideas (some empty, some stop words only)."""
    rng = np.random.default_rng(seed)
    tree = build_frequency_tree(tree_rows)
    docs = [
        rng.integers(0, tree.n_nodes, rng.integers(0, PAD_WIDTH + 4)).tolist()
        for _ in range(n_docs)
    ]
    docs[1], docs[2] = [], list(docs[0])
    ideas = [" ".join(rng.choice(WORDS, rng.integers(0, 7))) for _ in range(n_docs)]
    ideas[3], ideas[4], ideas[5] = "", "so the and", ideas[6]
    return tree_rows, docs, ideas


CORPORA = [random_corpus(seed, TREES[seed]) for seed in range(5)]


def scorer_of(corpus, root_fix: bool, pooled: bool, empty_fix: bool) -> PairScorer:
    tree_rows, docs, ideas = corpus
    lin = lin_similarity(build_frequency_tree(tree_rows), root_self_similarity=root_fix)
    return PairScorer(bma_index(lin, docs), idea_tokens(ideas), pooled, empty_fix)


def reference_matrices(corpus, root_fix: bool, pooled: bool, empty_fix: bool):
    """float16 (n, n) BMA and Jaccard, pair by pair in plain Python."""
    tree_rows, docs, ideas = corpus
    nodes, total = ref.frequency_tree(tree_rows)
    lin = ref.lin_matrix(nodes, total, root_fix=root_fix)

    def bma(a, b):
        if pooled:
            return ref.bma(lin, a, b)
        if not a or not b:
            return 0.0
        h_a = sum(max(lin[x][y] for y in b) for x in a)
        h_b = sum(max(lin[y][x] for x in a) for y in b)
        return (h_a / len(a) + h_b / len(b)) * 0.5

    tokens = [ref.tokens(text, REFERENCE_STOP_WORDS) for text in ideas]
    b = np.array([[bma(x, y) for y in docs] for x in docs]).astype(np.float16)
    j = np.array([[ref.jaccard(x, y, empty_fix) for y in tokens] for x in tokens])
    return b, j.astype(np.float16)


SETTINGS = [(False, True, False), (True, True, True), (False, False, False), (True, False, True)]


@pytest.mark.parametrize("corpus", CORPORA, ids=range(len(CORPORA)))
@pytest.mark.parametrize("settings", SETTINGS, ids=["published", "fixes", "mean", "mean-fixes"])
def test_kernel_rows_are_bit_identical_to_the_pairwise_reference(corpus, settings):
    scorer = scorer_of(corpus, *settings)
    bma, jac = reference_matrices(corpus, *settings)
    rows = np.r_[np.arange(scorer.n_docs), [7, 0, 7]]  # any order, repeats
    got_b, got_j = scorer.rows(rows)
    assert np.array_equal(got_b.view(np.uint16), bma[rows].view(np.uint16))
    assert np.array_equal(got_j.view(np.uint16), jac[rows].view(np.uint16))
    assert np.array_equal(bma.view(np.uint16), bma.T.view(np.uint16))  # what the passes use


# ------------------------------------------------------------------------ passes
def brute_counts(bma, jac, t_bma, t_jac):
    """Per row: topic-only, summary-only and both members (the row itself never high)."""
    out = []
    for i in range(len(bma)):
        c = [0, 0, 0]
        for j in range(len(bma)):
            if j == i:
                continue
            high_b, high_j = bma[i, j] >= np.float16(t_bma), jac[i, j] >= np.float16(t_jac)
            if high_b or high_j:
                c[2 if high_b and high_j else 0 if high_b else 1] += 1
        out.append(c)
    return out


def pattern_counts(matrix):
    return np.bincount(matrix.view(np.uint16).ravel(), minlength=1 << 16)


def around(t_bma, t_jac, below: int, above: int) -> Band:
    """A band of ``below`` float16 steps under each threshold and ``above`` from it."""
    bits_b, bits_j = threshold_bits(t_bma, t_jac)
    return Band(bits_b - below, below + above, bits_j - below, below + above)


@pytest.mark.parametrize("corpus", CORPORA[:3], ids=range(3))
@pytest.mark.parametrize("n_units", [1, 4, 45])
@pytest.mark.parametrize("workers", [1, 2])
def test_passes_equal_brute_force_histograms_and_counts(corpus, n_units, workers):
    scorer = scorer_of(corpus, *SETTINGS[0])
    bma, jac = reference_matrices(corpus, *SETTINGS[0])
    t_bma, t_jac = float(np.median(bma)), float(np.median(jac))  # many pairs on either side
    expected = brute_counts(bma, jac, t_bma, t_jac)
    units = row_units(scorer.n_docs, n_units)
    plain = run_pass(scorer.arrays, units, Band.none(), workers=workers)
    assert np.array_equal(plain.hist_b, pattern_counts(bma))  # every ordered pair, self too
    assert np.array_equal(plain.hist_j, pattern_counts(jac))
    assert plain.units_done == set(range(len(units))) and plain.counts.shape == (0, 3)
    exact = run_pass(scorer.arrays, units, Band.exact(t_bma, t_jac), workers=workers)
    assert exact.counts.tolist() == expected
    assert np.array_equal(exact.hist_b, plain.hist_b)
    # bands: the threshold inside, on the lower and on the upper edge; wide enough for events
    for below, above in ((3, 4), (0, 5), (5, 0), (400, 400)):
        banded = run_pass(scorer.arrays, units, around(t_bma, t_jac, below, above))
        assert resolve_counts(banded, t_bma, t_jac).tolist() == expected
    assert len(banded.events) > 0  # both signals in their bands for some pairs
    assert (
        resolve_counts(run_pass(scorer.arrays, units, around(t_bma, t_jac, -1, 5)), t_bma, t_jac)
        is None
    )
    assert row_counts(scorer, np.arange(scorer.n_docs), t_bma, t_jac).tolist() == expected


def test_the_sampled_band_holds_the_published_thresholds():
    scorer = scorer_of(CORPORA[4], *SETTINGS[0])
    bma, jac = reference_matrices(CORPORA[4], *SETTINGS[0])
    rows = sample_rows(scorer.n_docs, seed=3)
    assert rows.tolist() == list(range(scorer.n_docs))  # a small corpus: every row
    histograms = sample_histograms(scorer.arrays, rows, workers=2)
    assert np.array_equal(sum(h[0] for h in histograms), pattern_counts(bma))
    band = sample_band(histograms, 0.9)
    totals = run_pass(scorer.arrays, row_units(scorer.n_docs, 3), band)
    t_bma = histogram_threshold(totals.hist_b, 0.9)
    t_jac = histogram_threshold(totals.hist_j, 0.9)
    assert resolve_counts(totals, t_bma, t_jac).tolist() == brute_counts(bma, jac, t_bma, t_jac)
    big = sample_rows(250_000, seed=3)
    assert len(big) == 2500 and len(set(big.tolist())) == 2500
    assert np.array_equal(big, sample_rows(250_000, seed=3))


def test_row_units_cover_the_rows_with_balanced_pairs():
    units = row_units(1000, 8)
    assert units[0][0] == 0 and units[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(units))
    pairs = [sum(1000 - i for i in range(*u)) for u in units]
    assert max(pairs) / min(pairs) < 1.05
    assert row_units(3, 10) == [(0, 1), (1, 2), (2, 3)] and row_units(0, 4) == []


def test_a_resumed_pass_skips_done_units_and_adds_up_to_the_same_totals():
    scorer = scorer_of(CORPORA[0], *SETTINGS[0])
    units = row_units(scorer.n_docs, 6)
    band = around(0.3, 0.2, 40, 40)
    whole = run_pass(scorer.arrays, units, band)
    saved = []
    keep = lambda totals: saved.append(copy.deepcopy(totals))  # noqa: E731
    run_pass(scorer.arrays, units, band, only=[1, 4], after_unit=keep)
    assert [s.units_done for s in saved] == [{1}, {1, 4}]  # whole units, one by one
    done = []
    rest = run_pass(scorer.arrays, units, band, skip={1}, progress=lambda d, t: done.append((d, t)))
    assert len(done) == 5 and done[-1][0] == done[-1][1]  # unit 1 not run again
    resumed = saved[0]
    resumed.add(rest)
    assert resumed.units_done == set(range(6))
    for name in ("hist_b", "hist_j", "counts", "band_b", "band_j"):
        assert np.array_equal(getattr(resumed, name), getattr(whole, name))
    assert np.array_equal(resolve_counts(resumed, 0.3, 0.2), resolve_counts(whole, 0.3, 0.2))
    with pytest.raises(ValueError, match="units counted twice"):
        resumed.add(saved[0])
    with pytest.raises(ValueError, match="cannot add totals of band"):
        resumed.add(run_pass(scorer.arrays, units, Band.none(), only=[0]))


def test_pass_key_changes_with_the_inputs_units_and_band():
    a = scorer_of(CORPORA[0], *SETTINGS[0]).arrays
    b = scorer_of(CORPORA[0], *SETTINGS[1]).arrays
    units = row_units(a.n_docs, 4)
    keys = {
        pass_key(a, units, Band.none()),
        pass_key(b, units, Band.none()),
        pass_key(a, row_units(a.n_docs, 5), Band.none()),
        pass_key(a, units, Band.exact(0.5, 0.5)),
    }
    assert len(keys) == 4 and pass_key(a, units, Band.none()) == pass_key(
        a, list(units), Band.none()
    )
