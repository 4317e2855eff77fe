"""A tiny benchmark in the export format, written by hand (not by this project's exporter).

``write_tiny_benchmark`` is shared by the ``test_eval*`` modules: 12 documents in 3 domains,
6 queries with float ratings (one query has only 10 candidates, one has tied ratings), the
relevant documents sharing words with their query so that BM25 and MiniLM beat random.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from saber_eval.benchmark import SETTINGS, full_text, parse_settings
from saber_eval.loading import load_benchmark

DOCS = {
    "alg-quad-1": (
        "Solve the quadratic equation x^2 - 5x + 6 = 0 for its real roots.",
        "Factor the quadratic as (x - 2)(x - 3) = 0, so the roots are 2 and 3.",
    ),
    "alg-quad-2": (
        "Find the real roots of the quadratic equation x^2 - 7x + 12 = 0.",
        "Factor the quadratic: (x - 3)(x - 4) = 0 gives the roots 3 and 4.",
    ),
    "alg-ineq-1": (
        "Prove that a^2 + b^2 >= 2ab for all real numbers a and b.",
        "Expand the square (a - b)^2 >= 0.",
    ),
    "alg-poly-1": (
        "Find the sum of the roots of the cubic polynomial x^3 - 6x^2 + 11x - 6.",
        "By Vieta's formulas the sum of the roots of the polynomial is 6.",
    ),
    "geo-tri-1": (
        "In a right triangle the legs are 3 and 4. Find the hypotenuse of the triangle.",
        "By the Pythagorean theorem the hypotenuse is 5.",
    ),
    "geo-tri-2": (
        "A right triangle has hypotenuse 13 and one leg 5. Find the other leg of the triangle.",
        "By the Pythagorean theorem the other leg is 12.",
    ),
    "geo-circ-1": (
        "Find the area of a circle with radius 3.",
        "The area of a circle of radius r is pi r^2, here 9 pi.",
    ),
    "geo-angle-1": (
        "The angles of a triangle are x, 2x and 3x degrees. Find x.",
        "The angles of a triangle sum to 180 degrees, so 6x = 180 and x = 30.",
    ),
    "nt-prime-1": (
        "Show that there are infinitely many prime numbers.",
        "If there were finitely many primes, their product plus one has a new prime divisor.",
    ),
    "nt-mod-1": (
        "Find the remainder when 2^10 is divided by 7.",
        "Powers of 2 modulo 7 repeat with period 3, so the remainder of 2^10 is 2.",
    ),
    "nt-mod-2": (
        "Find the remainder when 3^100 is divided by 7.",
        "Powers of 3 modulo 7 repeat with period 6, so the remainder of 3^100 is 4.",
    ),
    "nt-div-1": (
        "Prove that n^3 - n is divisible by 6 for every integer n.",
        "n^3 - n = (n - 1) n (n + 1) is a product of three consecutive integers.",
    ),
}

# query id -> (problem, solution, domain, {doc: rating}); unlisted candidates get a low rating
QUERIES = {
    "q-alg-1": (
        "Solve the quadratic equation x^2 - 3x + 2 = 0 and find its real roots.",
        "Factor: (x - 1)(x - 2) = 0, so the roots are 1 and 2.",
        "Algebra",
        {"alg-quad-1": 4.6, "alg-quad-2": 4.1, "alg-poly-1": 2.2, "alg-ineq-1": 1.0},
    ),
    "q-alg-2": (
        "Find the sum of the roots of the polynomial x^3 - 2x^2 - 5x + 6.",
        "By Vieta's formulas the sum of the roots is 2.",
        "Algebra",
        {"alg-poly-1": 4.8, "alg-quad-1": 2.0, "alg-quad-2": 1.9, "alg-ineq-1": 0.5},
    ),
    "q-geo-1": (
        "A right triangle has legs 6 and 8. Find the hypotenuse of the triangle.",
        "By the Pythagorean theorem the hypotenuse is 10.",
        "Geometry",
        {"geo-tri-1": 4.9, "geo-tri-2": 4.0, "geo-angle-1": 1.5, "geo-circ-1": 0.7},
    ),
    "q-geo-2": (
        "Find the area of a circle whose radius is 5.",
        "The area of the circle is pi r^2 = 25 pi.",
        "Geometry",
        {"geo-circ-1": 5.0, "geo-tri-1": 1.2, "geo-angle-1": 1.0, "geo-tri-2": 0.9},
    ),
    "q-nt-1": (
        "Find the remainder when 5^20 is divided by 7.",
        "Powers of 5 modulo 7 repeat with period 6, so 5^20 leaves remainder 4.",
        "Number Theory",
        {"nt-mod-1": 4.7, "nt-mod-2": 4.5, "nt-div-1": 1.1, "nt-prime-1": 0.3},
    ),
    "q-nt-2": (
        "Prove that n^5 - n is divisible by 5 for every integer n.",
        "By Fermat's little theorem n^5 = n modulo 5.",
        "Number Theory",
        {"nt-div-1": 4.4, "nt-mod-1": 2.0, "nt-mod-2": 2.0, "nt-prime-1": 1.0},
    ),
}
SHORT_QUERY = "q-nt-2"  # has only 10 candidates (two geometry documents left out)


def words(text: str) -> set[str]:
    """Lower-cased word set (for the fixture's jaccard_scores)."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def write_tiny_benchmark(folder: Path) -> Path:
    """Write ``queries.jsonl`` and ``corpus.jsonl`` (export format) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    order = list(DOCS)
    rng = np.random.default_rng(7)
    with (folder / "corpus.jsonl").open("w") as handle:
        for doc_id, (problem, solution) in DOCS.items():
            row = {"doc_id": doc_id, "problem": problem, "solution": solution, "summary": ""}
            handle.write(json.dumps({**row, "topics": []}) + "\n")
    with (folder / "queries.jsonl").open("w") as handle:
        for qid, (problem, solution, domain, ratings) in QUERIES.items():
            candidates = [order[i] for i in rng.permutation(len(order))]
            if qid == SHORT_QUERY:
                candidates = [c for c in candidates if c not in ("geo-tri-2", "geo-circ-1")]
            relevance = [ratings.get(c, round(0.1 * (len(c) % 4), 1)) for c in candidates]
            jaccard = [
                len(words(problem) & words(DOCS[c][0])) / len(words(problem) | words(DOCS[c][0]))
                for c in candidates
            ]
            row = {
                "query_id": qid,
                "problem": problem,
                "solution": solution,
                "domain": domain,
                "candidates": candidates,
                "candidate_groups": ["topic"] * len(candidates),
                "relevance_scores": relevance,
                "jaccard_scores": jaccard,
                "bma_scores": [0.0] * len(candidates),
            }
            handle.write(json.dumps(row) + "\n")
    return folder


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    return write_tiny_benchmark(tmp_path / "tinybench")


def test_tiny_benchmark_loads_with_variable_pool_sizes(tiny_dir):
    bench = load_benchmark(tiny_dir)
    assert [q.query_id for q in bench.queries] == list(QUERIES)
    assert bench.width == 12
    short = next(q for q in bench.queries if q.query_id == SHORT_QUERY)
    assert len(short.candidates) == 10
    ratings = bench.ratings()
    assert ratings.shape == (6, 12)
    row = [q.query_id for q in bench.queries].index(SHORT_QUERY)
    assert np.all(ratings[row, 10:] == 0)  # zero padding
    assert bench.label == f"tinybench-{bench.hash[:8]}"


def test_settings_texts(tiny_dir):
    bench = load_benchmark(tiny_dir)
    query = bench.queries[0]
    first_doc = DOCS[query.candidates[0]]
    for setting, (q_side, d_side) in SETTINGS.items():
        queries, docs = bench.texts(setting)
        want_q = (
            query.problem if q_side == "statement" else full_text(query.problem, query.solution)
        )
        want_d = first_doc[0] if d_side == "statement" else full_text(*first_doc)
        assert (queries[0], docs[0][0]) == (want_q, want_d)
    assert full_text("P", "S") == "Problem: P\n\nSolution: S"
    assert parse_settings("all") == list(SETTINGS)
    assert parse_settings(["full-full", "statement-full"]) == ["statement-full", "full-full"]
    with pytest.raises(ValueError, match="unknown setting"):
        parse_settings("statement")


def test_hash_changes_with_content(tiny_dir):
    before = load_benchmark(tiny_dir).hash
    path = tiny_dir / "queries.jsonl"
    path.write_text(path.read_text().replace("4.6", "4.5"))
    assert load_benchmark(tiny_dir).hash != before


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.update(relevance_scores=r["relevance_scores"][:-1]), "relevance_scores"),
        (lambda r: r.update(candidates=[*r["candidates"][:-1], "nope"]), "not in corpus"),
        (lambda r: r.update(relevance_scores=[-1.0] * len(r["candidates"])), ">= 0"),
        (lambda r: r.update(query_id="has space"), "whitespace"),
    ],
)
def test_invalid_rows_are_named(tiny_dir, edit, message):
    path = tiny_dir / "queries.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    edit(rows[0])
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ValueError, match=message):
        load_benchmark(tiny_dir)
