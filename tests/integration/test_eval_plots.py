"""Leaderboard plots stay readable with the paper's 49 retrievers: numbered points with a key
beside the scatter plots, a heatmap for the per-domain figure."""

import datetime as dt

import numpy as np
import polars as pl

from saber_eval.plots import (
    MAX_NAMED,
    per_domain_plot,
    point_labels,
    quality_latency_plot,
    release_date_plot,
)


def _frame(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    rows = [
        {
            "retriever": f"model-{i:02d}",
            "setting": s,
            "kind": "reranker" if i % 4 else "single-pass",
            "median_latency_s": float(10 ** rng.uniform(-3, 1)),
            "ndcg@10": float(rng.uniform()),
            "release_date": dt.date(2021 + i % 5, 1 + i % 12, 1),
            "Algebra": float(rng.uniform()),
            "Geometry": float(rng.uniform()),
        }
        for i in range(n)
        for s in ("statement-full", "full-full")
    ]
    return pl.DataFrame(rows)


def test_points_are_named_up_to_the_limit_then_numbered():
    few = [f"m{i}" for i in range(MAX_NAMED)]
    assert point_labels(few) == {n: n for n in few}
    many = [f"m{i}" for i in range(MAX_NAMED + 1)] + ["m0"]  # repeated names keep one number
    labels = point_labels(many)
    assert list(labels.values()) == [str(i) for i in range(1, MAX_NAMED + 2)]


def test_fifty_retrievers_give_a_key_and_a_heatmap(tmp_path):
    frame = _frame(50)
    import matplotlib.image as mpimg

    wide = mpimg.imread(quality_latency_plot(frame, tmp_path / "ql.png"))
    narrow = mpimg.imread(quality_latency_plot(_frame(5), tmp_path / "ql5.png"))
    assert wide.shape[1] > narrow.shape[1]  # the key column beside the panels
    heat = mpimg.imread(per_domain_plot(frame, ["Algebra", "Geometry"], tmp_path / "pd.png"))
    assert heat.shape[0] > heat.shape[1]  # one row per retriever: taller than wide
    assert release_date_plot(frame, tmp_path / "rd.png").exists()
