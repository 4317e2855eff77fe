"""``saber judge agree`` on the tiny export against a qrels file written here: the JSON and the
printed figures equal scipy / scikit-learn on the same pairs, coverage gaps are reported, a
malformed qrels line is an error naming its line; ``qrels-from-champ`` grades by shared concepts."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau, linregress, spearmanr
from sklearn.metrics import cohen_kappa_score, confusion_matrix, roc_auc_score

from saber_cli.main import main
from saber_eval.agreement_sources import champ_qrels, load_source
from saber_eval.loading import load_benchmark
from saber_eval.runfile import write_run
from tests.integration.test_eval_data import write_tiny_benchmark

LEFT_OUT = 2  # candidates per query the qrels file does not judge


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A SABER home with the tiny export and three hand-made runs in its eval folder."""
    bench = load_benchmark(write_tiny_benchmark(tmp_path / "home" / "export"))
    runs = tmp_path / "home" / "eval" / bench.label / "runs"
    rng = np.random.default_rng(2)
    for name, noise in (("good", 0.3), ("noisy", 3.0), ("tied", None)):
        scores = [
            np.zeros(len(q.candidates))  # every score tied: the tie rule decides
            if noise is None
            else q.relevance + rng.normal(0, noise, len(q.candidates))
            for q in bench.queries
        ]
        ids = [q.query_id for q in bench.queries]
        write_run(runs / name / "statement-full.trec", ids, [q.candidates for q in bench.queries],
                  scores, name)  # fmt: skip
    return tmp_path / "home"


def _grade(rating: float) -> int:
    return 2 if rating >= 3.5 else 1 if rating >= 1.5 else 0


def _write_qrels(home: Path, path: Path) -> dict:
    """Grades of the export's pairs (A's rating coarsened, one pair flipped), LEFT_OUT
    candidates per query unjudged, plus a query and a document the build lacks."""
    bench = load_benchmark(home / "export")
    lines, grades = [], {}
    for q in bench.queries:
        for doc, rating in list(zip(q.candidates, q.relevance, strict=True))[LEFT_OUT:]:
            grade = _grade(rating)
            if (q.query_id, doc) == (bench.queries[0].query_id, q.candidates[LEFT_OUT]):
                grade = 2 - grade
            grades[(q.query_id, doc)] = grade
            lines.append(f"{q.query_id} 0 {doc} {grade}")
    lines += ["q-unknown 0 alg-quad-1 2", f"{bench.queries[0].query_id} 0 not-in-build 1"]
    path.write_text("\n".join(lines) + "\n")
    return grades


def _ndcg10(docs, scores, gains):
    """nDCG@10, exponential gain, ties by descending doc id (written here, not imported)."""
    by_id = sorted(range(len(docs)), key=lambda i: docs[i].encode(), reverse=True)
    order = sorted(by_id, key=lambda i: -scores[i])  # stable: ties keep descending doc id
    dcg = sum((2 ** gains[i] - 1) / math.log2(r + 2) for r, i in enumerate(order[:10]))
    ideal = sorted(gains, reverse=True)
    idcg = sum((2**g - 1) / math.log2(r + 2) for r, g in enumerate(ideal[:10]))
    return dcg / idcg if idcg > 0 else 0.0


def test_agree_figures_coverage_and_leaderboards(home, tmp_path, capsys):
    qrels = tmp_path / "concepts.qrels"
    grades = _write_qrels(home, qrels)
    out = tmp_path / "out"
    argv = ["judge", "agree", str(home), str(qrels), "--cuts-a", "1.5,3.5", "--cuts-b", "0.5,1.5"]
    assert main([*argv, "--bootstrap", "200", "--seed", "5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "agreement.json").read_text())
    assert (out / "agreement_confusion.png").stat().st_size > 0
    assert (out / "agreement_scatter.png").stat().st_size > 0

    bench = load_benchmark(home / "export")
    rating = {
        (q.query_id, d): r
        for q in bench.queries
        for d, r in zip(q.candidates, q.relevance, strict=True)
    }
    keys = sorted(grades)
    qids = np.array([q for q, _ in keys])
    a = np.array([rating[k] for k in keys])
    b = np.array([grades[k] for k in keys], dtype=float)

    cov = report["coverage"]
    assert cov["pairs_both"] == len(keys)
    assert cov["pairs_only_a"]["count"] == LEFT_OUT * len(bench.queries)
    both_gaps = ["q-alg-1 not-in-build", "q-unknown alg-quad-1"]  # pairs of a B-only query too
    assert cov["pairs_only_b"] == {"count": 2, "examples": both_gaps}
    assert cov["queries_only_b"] == {"count": 1, "examples": ["q-unknown"]}
    assert cov["queries_only_a"]["count"] == 0
    assert "pairs only B labels          2 (e.g. q-alg-1 not-in-build, q-unknown" in printed

    fig = {k: v["value"] for k, v in report["pairs"]["figures"].items()}
    la, lb = np.digitize(a, [1.5, 3.5]), b.astype(int)
    assert report["pairs"]["confusion"] == confusion_matrix(la, lb, labels=[0, 1, 2]).tolist()
    assert fig["exact_agreement"] == pytest.approx(np.mean(la == lb))
    for weights in ("linear", "quadratic"):
        want = cohen_kappa_score(la, lb, weights=weights, labels=[0, 1, 2])
        assert fig[f"kappa_{weights}"] == pytest.approx(want)
        assert f"weighted κ ({weights})" in printed and f"{want:.3f}" in printed
    ends = lb != 1
    assert fig["auc"] == pytest.approx(roc_auc_score(lb[ends] == 2, a[ends]))
    rhos, rss, ss = [], 0.0, 0.0
    for q in dict.fromkeys(qids):
        x, y = a[qids == q], b[qids == q]
        fit = linregress(x, y)
        rss += np.sum((y - fit.intercept - fit.slope * x) ** 2)
        ss += np.sum((y - y.mean()) ** 2)
        if np.ptp(y) > 0:
            rhos.append(spearmanr(x, y).statistic)
    assert fig["r2_within"] == pytest.approx(1 - rss / ss)
    assert fig["spearman_median"] == pytest.approx(np.median(rhos))
    assert f"{np.median(rhos):.3f}" in printed
    assert report["pairs"]["bootstrap"]["seed"] == 5
    for f in report["pairs"]["figures"].values():
        assert f["lo"] <= f["hi"]

    systems = report["systems"]
    runs = home / "eval" / bench.label / "runs"
    assert systems["runs_dir"] == str(runs)
    got = {r["retriever"]: (r["ndcg@10_a"], r["ndcg@10_b"]) for r in systems["retrievers"]}
    assert set(got) == {"good", "noisy", "tied"}
    want = {}
    for name in got:
        scored = {}
        for line in (runs / name / "statement-full.trec").read_text().splitlines():
            qid, _, doc, _, score, _ = line.split()
            scored[(qid, doc)] = float(score)
        per_a, per_b = [], []
        for q in sorted(set(qids)):
            docs = [d for qq, d in keys if qq == q]
            scores = [scored[(q, d)] for d in docs]
            per_a.append(_ndcg10(docs, scores, [rating[(q, d)] for d in docs]))
            per_b.append(_ndcg10(docs, scores, [grades[(q, d)] for d in docs]))
        want[name] = (np.mean(per_a), np.mean(per_b))
        assert got[name] == pytest.approx(want[name]), name
    names = list(got)
    va, vb = np.array([got[n][0] for n in names]), np.array([got[n][1] for n in names])
    assert systems["kendall_tau_b"] == pytest.approx(kendalltau(va, vb).statistic)
    assert "τ_AP" in printed and "adjacent pairs of A's leaderboard that B swaps" in printed


def test_unknown_ids_only_are_coverage_not_an_error(home, tmp_path, capsys):
    qrels = tmp_path / "elsewhere.qrels"
    qrels.write_text("other-q 0 other-doc 2\nother-q 0 alg-quad-1 0\n")
    assert main(["judge", "agree", str(home), str(qrels), "--out", str(tmp_path / "o")]) == 0
    report = json.loads((tmp_path / "o" / "agreement.json").read_text())
    assert report["pairs"] is None and report["coverage"]["pairs_only_b"]["count"] == 2
    assert report["coverage"]["queries_only_a"]["count"] == 6
    assert "no pair is labelled by both sources" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("q-alg-1 0 alg-quad-1", "expected 'query_id 0 doc_id relevance'"),
        ("q-alg-1 0 alg-quad-1 high", "is not a number"),
        ("q-alg-1 0 alg-quad-1 -1", "must be finite and >= 0"),
        ("q-alg-1 0 alg-quad-2 1", "judged twice"),
    ],
)
def test_malformed_qrels_line_is_an_error_naming_it(home, tmp_path, capsys, line, message):
    qrels = tmp_path / "bad.qrels"
    qrels.write_text(f"q-alg-1 0 alg-quad-2 2\nq-alg-2 0 alg-poly-1 1\n{line}\n")
    assert main(["judge", "agree", str(home), f"qrels:{qrels}", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{qrels}:3:" in err and message in err


def test_run_file_source_labels_are_its_scores(home):
    run = next((home / "eval").glob("*/runs/good/statement-full.trec"))
    source = load_source(str(run))
    first = run.read_text().splitlines()[0].split()
    assert source.kind == "run" and source.labels[first[0]][first[2]] == float(first[4])


def test_champ_grades_by_shared_concepts(home, tmp_path, monkeypatch, capsys):
    bench = load_benchmark(home / "export")
    q = bench.queries[0]
    docs = q.candidates
    concepts = {q.query_id: ("C_a", "C_b", "C_c"), docs[0]: ("C_a",), docs[1]: ("C_a", "C_b"),
                docs[2]: ("C_a", "C_b", "C_c"), docs[3]: ("C_z",), docs[4]: ()}  # fmt: skip
    labels = champ_qrels(bench, concepts)
    assert labels == {q.query_id: {docs[0]: 1.0, docs[1]: 2.0, docs[2]: 2.0, docs[3]: 0.0}}
    import saber_store.sources as sources

    monkeypatch.setattr(sources, "champ_concepts", lambda: concepts)
    out = tmp_path / "champ.qrels"
    assert main(["judge", "qrels-from-champ", "--home", str(home), "--out", str(out)]) == 0
    assert sorted(out.read_text().splitlines()) == sorted(
        f"{q.query_id} 0 {d} {g}" for d, g in zip(docs[:4], (1, 2, 2, 0), strict=True)
    )
    assert "4 pairs of 1 queries" in capsys.readouterr().out


def test_agree_runs_without_dagster(home, tmp_path):
    qrels = tmp_path / "q.qrels"
    _write_qrels(home, qrels)
    code = (
        "import sys\n"
        "from saber_cli.main import main\n"
        f"assert main(['judge', 'agree', {str(home)!r}, {str(qrels)!r}, '--bootstrap', '20',"
        f" '--out', {str(tmp_path / 'o')!r}]) == 0\n"
        "print('DAGSTER', 'dagster' in sys.modules, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "DAGSTER False False" in out.stdout


def test_a_build_against_a_copy_of_its_export_agrees_perfectly(home, tmp_path):
    other = tmp_path / "other-export"
    shutil.copytree(home / "export", other)
    evaluate = ["eval", "--benchmark", str(home / "export"), "--retriever", "bm25"]
    assert main([*evaluate, "--no-mlflow", "--bootstrap", "50", "--out", str(home / "eval")]) == 0
    runner = json.loads(next((home / "eval").glob("*/runs/bm25/statement-full.json")).read_text())
    out = tmp_path / "same"
    assert (
        main(["judge", "agree", str(home), str(other), "--cuts", "1.5,3.5", "--out", str(out)]) == 0
    )
    report = json.loads((out / "agreement.json").read_text())
    assert report["b"]["kind"] == "export" and report["coverage"]["pairs_only_a"]["count"] == 0
    fig = {k: v["value"] for k, v in report["pairs"]["figures"].items()}
    ones = ("r2_within", "spearman_median", "exact_agreement", "auc", "kappa_linear")
    assert [fig[k] for k in ones] == pytest.approx([1.0] * len(ones))
    assert fig["extreme_flips"] == 0.0
    systems = report["systems"]
    assert (systems["kendall_tau_b"], systems["tau_ap"], systems["swaps"]) == (1.0, 1.0, [])
    for row in systems["retrievers"]:
        assert row["ndcg@10_a"] == row["ndcg@10_b"]
    bm25 = next(r for r in systems["retrievers"] if r["retriever"] == "bm25")
    assert bm25["ndcg@10_a"] == pytest.approx(runner["ndcg@10"], rel=1e-12)  # the runner's figure


def test_champ_concepts_are_the_annotated_concept_ids():
    from saber_store.sources import champ_concepts, champ_corpus

    concepts = champ_concepts()
    assert len(concepts) == 270
    assert sum(not c for c in concepts.values()) == 47  # hints only (docs/validity.md)
    topics = dict(zip(*champ_corpus().select("doc_id", "topics").to_dict().values(), strict=True))
    for pid, ids in concepts.items():
        assert all(c.startswith("C_") for c in ids) and len(set(ids)) == len(ids)
        if ids:  # the corpus' topics are the same concepts
            assert list(topics[pid]) == list(ids)
