"""``saber eval --mteb-scores FILE [--since DATE]``: Pearson r, Spearman ρ and Kendall τ-b with
their p-values and n, over all matched models and over those released since DATE (registry
``release_date``, added with ``--registry``), against scipy.stats computed here on the stored
run summaries; subsets of fewer than 3 models say so instead of printing NaN."""

import json

import numpy as np
import polars as pl
import pytest
from scipy.stats import kendalltau, pearsonr, spearmanr
from test_eval import FixedScores
from test_eval_data import write_tiny_benchmark

from saber_eval.cli import eval_main
from saber_eval.correlation import correlate
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.runner import retriever_slug, run_retriever, write_outputs

# spec -> (release date or None, display name or None, MTEB score); the CSV names m2 and m5
# by display name, the others by spec; m3 and m6 tie on MTEB (τ-b ≠ τ-a)
MODELS = {
    "fixed:m1": ("2024-06", None, 0.61),
    "fixed:m2": ("2025-01-15", "Model Two", 0.55),
    "fixed:m3": ("2025-03", None, 0.70),
    "fixed:m4": ("2025", None, 0.42),
    "fixed:m5": (None, "Model Five", 0.66),
    "fixed:m6": (None, None, 0.70),
}
SINCE = ["fixed:m2", "fixed:m3", "fixed:m4"]  # released on or after 2025-01-01


@pytest.fixture
def evaluated(tmp_path):
    """Six stored runs of seeded random scores, a registry file with their release dates and
    display names, and the MTEB-score CSV."""
    bench = load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))
    out = tmp_path / "eval"
    rng = np.random.default_rng(11)
    for spec in MODELS:
        scores = {q.query_id: rng.random(len(q.candidates)).tolist() for q in bench.queries}
        run = run_retriever(
            bench, FixedScores(scores, spec), "statement-full", load_registry().get(spec)
        )
        write_outputs(run, out / bench.label)
    lines = ["retrievers:"]
    for spec, (released, name, _) in MODELS.items():
        lines.append(f'  "{spec}":')
        lines += [f"    release_date: '{released}'"] if released else []
        lines += [f"    display_name: {name}"] if name else ["    notes: undated"]
    registry = tmp_path / "dates.yaml"
    registry.write_text("\n".join(lines) + "\n")
    csv = tmp_path / "mteb.csv"
    names = {s: (n or s) for s, (_, n, _) in MODELS.items()}
    csv.write_text(
        "retriever,mteb_score\n" + "".join(f"{names[s]},{m[2]}\n" for s, m in MODELS.items())
    )
    args = ["--benchmark", str(bench.path), "--out", str(out), "--no-mlflow", "--bootstrap", "50"]
    return out / bench.label, [*args, "--registry", str(registry), "--mteb-scores", str(csv)]


def saber_ndcg(folder, specs):
    return np.array(
        [
            json.loads((folder / "runs" / retriever_slug(s) / "statement-full.json").read_text())[
                "ndcg@10"
            ]
            for s in specs
        ]
    )


def expected(folder, specs):
    mteb = np.array([MODELS[s][2] for s in specs])
    saber = saber_ndcg(folder, specs)
    return pearsonr(mteb, saber), spearmanr(mteb, saber), kendalltau(mteb, saber)


def line(label, n, r, rho, tau):
    return (
        f"SABER ndcg@10 vs MTEB (statement-full), {label}: n = {n}: Pearson r "
        f"{r.statistic:.3f} (p {r.pvalue:.3g}), Spearman ρ {rho.statistic:.3f} "
        f"(p {rho.pvalue:.3g}), Kendall τ-b {tau.statistic:.3f} (p {tau.pvalue:.3g})"
    )


def test_all_and_since_subsets_equal_scipy(evaluated, capsys):
    folder, args = evaluated
    assert eval_main([*args, "--since", "2025-01"]) == 0
    printed = capsys.readouterr().out.splitlines()
    result = json.loads((folder / "mteb_correlation.json").read_text())
    assert result["since"] == "2025-01-01"
    everything, since = result["subsets"]
    for subset, specs, label in (
        (everything, list(MODELS), "all models"),
        (since, SINCE, "released since 2025-01-01"),
    ):
        r, rho, tau = expected(folder, specs)
        assert sorted(subset["specs"]) == specs and subset["n"] == len(specs)
        assert subset["pearson_r"] == pytest.approx(r.statistic, abs=1e-12)
        assert subset["pearson_p"] == pytest.approx(r.pvalue, abs=1e-12)
        assert subset["spearman"] == pytest.approx(rho.statistic, abs=1e-12)
        assert subset["spearman_p"] == pytest.approx(rho.pvalue, abs=1e-12)
        assert subset["kendall_tau_b"] == pytest.approx(tau.statistic, abs=1e-12)
        assert subset["kendall_p"] == pytest.approx(tau.pvalue, abs=1e-12)
        assert line(label, len(specs), r, rho, tau) in printed
    assert (since["excluded_no_release_date"], since["excluded_released_before"]) == (2, 1)
    assert (
        "  left out of the since-2025-01-01 subset: 2 model(s) without a release_date in the "
        "registry, 1 released before"
    ) in printed
    table = pl.read_csv(folder / "mteb_correlation.csv")
    flagged = table.filter(pl.col("in_since_subset"))["spec"].sort().to_list()
    assert flagged == SINCE and table.height == len(MODELS)
    assert table.filter(pl.col("spec") == "fixed:m2")["release_date"].to_list() == ["2025-01-15"]
    assert (folder / "mteb_correlation.png").read_bytes()[:4] == b"\x89PNG"


def test_a_subset_of_fewer_than_three_models_says_so(evaluated, capsys):
    folder, args = evaluated
    assert eval_main([*args, "--since", "2025-02-01"]) == 0  # only m3
    printed = capsys.readouterr().out
    assert (
        "SABER ndcg@10 vs MTEB (statement-full), released since 2025-02-01: n = 1: fewer than 3 "
        "models, no correlation"
    ) in printed
    assert "nan" not in printed.lower()
    since = json.loads((folder / "mteb_correlation.json").read_text())["subsets"][1]
    assert since["pearson_r"] is None and since["kendall_tau_b"] is None
    assert (since["excluded_no_release_date"], since["excluded_released_before"]) == (2, 3)


def test_without_since_there_is_one_subset_and_no_flag_column(evaluated):
    folder, args = evaluated
    assert eval_main(args) == 0
    result = json.loads((folder / "mteb_correlation.json").read_text())
    assert result["since"] is None and [s["subset"] for s in result["subsets"]] == ["all"]
    assert "in_since_subset" not in pl.read_csv(folder / "mteb_correlation.csv").columns


@pytest.mark.parametrize("bad", ["2025-13", "Jan 2025", "2025-01-01-01"])
def test_bad_since_dates_are_refused_naming_the_value(evaluated, bad, capsys):
    with pytest.raises(SystemExit):
        eval_main([*evaluated[1], "--since", bad])
    assert f"--since: {bad!r}: use YYYY, YYYY-MM or YYYY-MM-DD" in capsys.readouterr().err


def test_since_needs_mteb_scores(capsys):
    with pytest.raises(SystemExit):
        eval_main(["--retriever", "bm25", "--since", "2025"])
    assert "--since selects models for --mteb-scores FILE" in capsys.readouterr().err


def test_constant_scores_give_no_coefficients_and_say_why():
    frame = pl.DataFrame(
        {"spec": ["a", "b", "c"], "ndcg@10": [0.3, 0.5, 0.4], "mteb_score": [0.6, 0.6, 0.6]}
    )
    result = correlate(frame)
    assert result["note"] == "every MTEB score is the same, no correlation"
    assert result["n"] == 3 and result["pearson_r"] is None and result["spearman"] is None
