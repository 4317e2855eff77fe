"""Corpus limits: a seeded balanced sample whose left-out rows are counted, never lost."""

import polars as pl

from saber_core.inputs.corpus import full_text, full_text_expr, limit_corpus, validate_corpus


def frame(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(n)],
            "problem": [f"problem {i}" for i in range(n)],
            "solution": [f"solution {i}" for i in range(n)],
            "domain": ["Algebra" if i % 3 else "Geometry" for i in range(n)],
        }
    )


def test_limit_keeps_a_balanced_seeded_sample_and_counts_the_rest():
    validated = validate_corpus(pl.concat([frame(30), frame(1)]))  # one duplicate row
    limited = limit_corpus(validated, 10, seed=0)
    assert (
        limited.corpus.height == 10 and limited.n_limited == 20 and limited.quarantine.height == 1
    )
    assert limited.corpus.height + limited.quarantine.height + limited.n_limited == 31
    assert dict(limited.corpus.group_by("domain").len().rows()) == {"Algebra": 5, "Geometry": 5}
    assert limited.corpus.equals(limit_corpus(validated, 10, seed=0).corpus)
    assert not limited.corpus.equals(limit_corpus(validated, 10, seed=1).corpus)
    assert limit_corpus(validated, 0, seed=0) is validated


def test_full_text_is_the_same_in_python_and_polars():
    assert full_text("P", "S") == "Problem: P\n\nSolution: S"
    out = pl.DataFrame({"p": ["x"], "s": ["y"]}).select(full_text_expr(pl.col("p"), pl.col("s")))
    assert out.item() == full_text("x", "y")
