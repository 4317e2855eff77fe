"""Streaming a query × corpus matrix block by block equals computing it whole."""

import numpy as np

from saber_core.discovery.blocks import neighbour_frame, stream_rows
from saber_core.discovery.per_query import top_neighbours


def test_streamed_matrix_neighbours_and_mean_equal_the_whole_computation():
    rng = np.random.default_rng(0)
    full = rng.random((10, 23)).astype(np.float32)
    full[3, :5] = 0.5  # ties
    rows = np.array([9, 0, 3, 3, 7, 1, 2, 8, 4, 5])
    seen = []

    def block(r):
        seen.append(len(r))
        return full[r]

    out = np.zeros((len(rows), 23), dtype=np.float32)
    streamed = stream_rows(out, rows, block, neighbours=4, block_size=3)
    assert seen == [3, 3, 3, 1]
    np.testing.assert_array_equal(out, full[rows])
    idx, val = top_neighbours(full[rows], 4)
    np.testing.assert_array_equal(streamed.index, idx)
    np.testing.assert_array_equal(streamed.score, val)
    assert streamed.mean == float(full[rows].mean())
    frame = neighbour_frame(
        streamed,
        [f"q{r}" for r in range(10)],
        np.array([f"d{j}" for j in range(23)], dtype=object),
        "bma",
    )
    assert frame.height == 40 and frame["rank"].to_list()[:4] == [1, 2, 3, 4]
    first = frame.filter(frame["query_id"] == "q0")
    assert first["doc_id"].to_list() == [f"d{j}" for j in idx[0]]


def test_short_corpus_pads_and_drops_padding():
    out = np.zeros((2, 3), dtype=np.float32)
    streamed = stream_rows(out, np.array([0, 1]), lambda r: np.ones((len(r), 3)), neighbours=5)
    assert streamed.index.shape == (2, 3)  # k is capped by the corpus size
    frame = neighbour_frame(streamed, ["a", "b"], np.array(["x", "y", "z"], dtype=object), "s")
    assert frame.height == 6
