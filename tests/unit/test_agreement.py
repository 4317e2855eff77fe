"""Agreement of two label sources (saber_core.validity.agreement) against scipy / scikit-learn
computed here, a hand example, and a brute-force τ_AP."""

import numpy as np
import pytest
from scipy.stats import kendalltau, linregress, rankdata, spearmanr
from sklearn.metrics import cohen_kappa_score, confusion_matrix, roc_auc_score

from saber_core.validity.agreement import (
    cut_levels,
    group_ranks,
    pair_agreement,
    swapped_adjacent,
    system_agreement,
    tau_ap,
)


def _random_pairs(seed: int = 3, queries: int = 12):
    """Pairs of ``queries`` queries (3–9 candidates) with A a noisy 0–2 score and B discrete
    0/1/2 (ties), plus one query with constant B and one with 2 pairs."""
    rng = np.random.default_rng(seed)
    qids, a, b = [], [], []
    for q in range(queries):
        n = int(rng.integers(3, 10))
        truth = rng.uniform(0, 2, n)
        qids += [f"q{q:02d}"] * n
        a += list(np.round(truth + rng.normal(0, 0.4, n), 1).clip(0, 2))
        b += list(np.round(truth))
    qids += ["flat"] * 4 + ["short"] * 2 + ["flip"] * 2
    a += [0.2, 1.0, 1.7, 0.4, 1.1, 0.3, 1.9, 0.1]
    b += [1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0, 2.0]
    return np.array(qids), np.array(a), np.array(b)


def _by_query(qids, *columns):
    for q in dict.fromkeys(qids):
        mask = qids == q
        yield q, *(c[mask] for c in columns)


def test_figures_equal_scipy_and_sklearn():
    qids, a, b = _random_pairs()
    result = pair_agreement(a, b, qids, n_boot=50, seed=1)
    fig = {k: f.value for k, f in result.figures.items()}
    rss = ss = 0.0
    rhos, skipped = [], 0
    for _, x, y in _by_query(qids, a, b):
        ss += np.sum((y - y.mean()) ** 2)
        if np.ptp(x) > 0:
            fit = linregress(x, y)
            rss += np.sum((y - (fit.intercept + fit.slope * x)) ** 2)
        else:
            rss += np.sum((y - y.mean()) ** 2)
        if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
            skipped += 1
        else:
            rhos.append(spearmanr(x, y).statistic)
    assert fig["r2_within"] == pytest.approx(1 - rss / ss, rel=1e-12)
    assert fig["spearman_median"] == pytest.approx(np.median(rhos), rel=1e-12)
    assert result.spearman_skipped == skipped >= 3  # "flat", "short", "flip"
    la = np.digitize(a, [0.5, 1.5])  # independent of cut_levels: bins [0.5, 1.5)
    lb = np.digitize(b, [0.5, 1.5])
    np.testing.assert_array_equal(result.confusion, confusion_matrix(la, lb, labels=[0, 1, 2]))
    assert fig["exact_agreement"] == pytest.approx(np.mean(la == lb))
    flips = np.mean(((la == 0) & (lb == 2)) | ((la == 2) & (lb == 0)))
    assert flips > 0
    assert fig["extreme_flips"] == pytest.approx(flips)
    for weights in ("linear", "quadratic"):
        want = cohen_kappa_score(la, lb, weights=weights, labels=[0, 1, 2])
        assert fig[f"kappa_{weights}"] == pytest.approx(want, rel=1e-12)
    ends = (lb == 0) | (lb == 2)
    assert fig["auc"] == pytest.approx(roc_auc_score(lb[ends] == 2, a[ends]), rel=1e-12)
    assert result.auc_pairs == {"top": int(np.sum(lb == 2)), "bottom": int(np.sum(lb == 0))}
    assert (result.n_pairs, result.n_queries) == (len(a), 15)


def test_hand_example():
    # query x: A (0, 1, 2) vs B (0, 2, 1); query y: A (2, 0) vs B (2, 0)
    qids = np.array(["x", "x", "x", "y", "y"])
    a = np.array([0.0, 1.0, 2.0, 2.0, 0.0])
    b = np.array([0.0, 2.0, 1.0, 2.0, 0.0])
    r = pair_agreement(a, b, qids, n_boot=0)
    fig = {k: f.value for k, f in r.figures.items()}
    # x: S_ab = 1, S_aa = 2, S_bb = 2 → explained 0.5; y: S_ab = 2, S_aa = 2, S_bb = 2 → 2
    assert fig["r2_within"] == pytest.approx((0.5 + 2) / (2 + 2))
    assert fig["spearman_median"] == pytest.approx(0.5)  # only x (y has 2 pairs)
    assert (r.spearman_queries, r.spearman_skipped) == (1, 1)
    np.testing.assert_array_equal(r.confusion, [[2, 0, 0], [0, 0, 1], [0, 1, 1]])
    assert fig["exact_agreement"] == pytest.approx(3 / 5)
    assert fig["extreme_flips"] == 0.0
    # B top: A = 1, 2; B bottom: A = 0, 0 → all 4 comparisons won
    assert fig["auc"] == 1.0
    # linear κ: observed Σ w O = 2 · ½ / 5 = 0.2 (shares); expected rows (2,1,2) cols (2,1,2)
    expected = np.outer([2, 1, 2], [2, 1, 2]) / 25
    w = np.abs(np.subtract.outer(range(3), range(3))) / 2
    assert fig["kappa_linear"] == pytest.approx(1 - 0.2 / np.sum(w * expected))
    assert np.isnan(r.figures["auc"].lo)  # no bootstrap asked


def test_cut_levels_and_custom_cuts():
    assert cut_levels(np.array([0.0, 0.49, 0.5, 1.49, 1.5, 5.0])).tolist() == [0, 0, 1, 1, 2, 2]
    cuts = (0.5, 1.5, 2.5, 3.5, 4.5)
    ratings = np.array([0.2, 1.4, 2.6, 3.5, 4.9, 4.4])
    assert cut_levels(ratings, cuts).tolist() == [0, 1, 3, 4, 5, 4]
    qids = np.array(["q"] * 3 + ["r"] * 3)
    other = np.array([0.0, 1.0, 3.0, 4.0, 5.0, 5.0])
    r = pair_agreement(ratings, other, qids, cuts=cuts, n_boot=0)
    assert r.confusion.shape == (6, 6)
    lo, hi = cut_levels(ratings, cuts), cut_levels(other, cuts)
    want = cohen_kappa_score(lo, hi, weights="quadratic", labels=list(range(6)))
    assert r.figures["kappa_quadratic"].value == pytest.approx(want)
    with pytest.raises(ValueError, match="strictly increasing"):
        cut_levels(ratings, (1.5, 0.5))


def test_group_ranks_equal_scipy_per_group():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 5, 60)
    values = rng.integers(0, 4, 60).astype(float)
    ranks = group_ranks(values, codes)
    for c in range(5):
        np.testing.assert_allclose(ranks[codes == c], rankdata(values[codes == c]))


def test_bootstrap_is_seeded_and_covers_the_estimate():
    qids, a, b = _random_pairs()
    one = pair_agreement(a, b, qids, n_boot=300, seed=11)
    two = pair_agreement(a, b, qids, n_boot=300, seed=11)
    other = pair_agreement(a, b, qids, n_boot=300, seed=12)
    assert one.figures == two.figures
    assert one.figures["auc"] != other.figures["auc"]
    assert one.as_dict()["bootstrap"]["seed"] == 11
    for name, f in one.figures.items():
        assert f.lo < f.hi, name


def test_bootstrap_resample_equals_figures_of_the_resampled_pairs():
    """A resample's figures (from multiplicities) equal the figures of the pairs written out."""
    qids, a, b = _random_pairs(seed=5, queries=6)
    names = np.array(sorted(set(qids)))
    rng = np.random.default_rng(99)  # pair_agreement's first draw with seed 99, n_boot 1
    draw = names[rng.integers(0, len(names), size=(1, len(names)))[0]]
    copies = [(f"{q}#{k}", qids == q) for k, q in enumerate(draw)]
    qq = np.concatenate([np.full(m.sum(), tag) for tag, m in copies])
    aa = np.concatenate([a[m] for _, m in copies])
    bb = np.concatenate([b[m] for _, m in copies])
    direct = pair_agreement(aa, bb, qq, n_boot=0)
    boot = pair_agreement(a, b, qids, n_boot=1, seed=99)
    for name, f in boot.figures.items():
        want = direct.figures[name].value
        assert f.lo == pytest.approx(want, rel=1e-9, nan_ok=True), name


def _tau_ap_brute(a, b):
    order = sorted(range(len(b)), key=lambda i: -b[i])  # stable: ties keep input order
    n = len(order)
    total = 0.0
    for i in range(1, n):
        item = order[i]
        correct = sum(1.0 if a[j] > a[item] else 0.5 if a[j] == a[item] else 0.0 for j in order[:i])
        total += correct / i
    return 2 / (n - 1) * total - 1


def test_tau_ap_hand_example_and_brute_force():
    # B order: s1 > s2 > s3 > s4; A swaps the bottom two: C(2)=1, C(3)=2, C(4)=2
    b = np.array([4.0, 3.0, 2.0, 1.0])
    a = np.array([4.0, 3.0, 1.0, 2.0])
    assert tau_ap(a, b) == pytest.approx(2 / 3 * (1 / 1 + 2 / 2 + 2 / 3) - 1)  # 7/9
    # swapping the top two costs more than swapping the bottom two
    assert tau_ap(np.array([3.0, 4.0, 2.0, 1.0]), b) < tau_ap(a, b)
    assert tau_ap(b, b) == 1.0 and tau_ap(-b, b) == -1.0
    rng = np.random.default_rng(4)
    for _ in range(20):
        a, b = rng.integers(0, 5, 7).astype(float), rng.normal(size=7)
        assert tau_ap(a, b) == pytest.approx(_tau_ap_brute(a, b))


def test_system_agreement():
    names = ["bm25", "minilm", "random", "jaccard"]
    a = np.array([0.70, 0.93, 0.36, 0.49])
    b = np.array([0.60, 0.90, 0.40, 0.38])
    s = system_agreement(names, a, b)
    assert s["kendall_tau_b"] == pytest.approx(kendalltau(a, b).statistic)
    assert s["tau_ap"] == pytest.approx(_tau_ap_brute(a, b))
    # A: minilm > bm25 > jaccard > random; B puts random above jaccard
    assert s["swaps"] == [["jaccard", "random"]]
    assert swapped_adjacent(names, a, a) == []
    assert system_agreement(["one"], a[:1], b[:1])["tau_ap"] is None


def test_bad_inputs():
    with pytest.raises(ValueError, match="one length"):
        pair_agreement(np.zeros(3), np.zeros(2), ["q"] * 3)
    with pytest.raises(ValueError, match="no pair"):
        pair_agreement(np.zeros(0), np.zeros(0), [])
    with pytest.raises(ValueError, match="finite"):
        pair_agreement(np.array([np.nan]), np.zeros(1), ["q"])


def test_sources_on_different_scales_get_their_own_cuts():
    qids, a, b = _random_pairs()
    ratings = a * 2.5  # A on a 0–5 scale
    own = pair_agreement(ratings, b, qids, cuts=(1.25, 3.75), cuts_b=(0.5, 1.5), n_boot=0)
    same = pair_agreement(a, b, qids, cuts=(0.5, 1.5), n_boot=0)
    la = np.digitize(ratings, [1.25, 3.75])
    lb = np.digitize(b, [0.5, 1.5])
    np.testing.assert_array_equal(own.confusion, confusion_matrix(la, lb, labels=[0, 1, 2]))
    assert own.figures["auc"].value == pytest.approx(same.figures["auc"].value)  # raw A, rescaled
    assert own.as_dict()["cuts_a"] == [1.25, 3.75] and own.as_dict()["cuts_b"] == [0.5, 1.5]
    with pytest.raises(ValueError, match="differ in number"):
        pair_agreement(a, b, qids, cuts=(0.5, 1.5), cuts_b=(1.0,), n_boot=0)
