"""Query × corpus score matrices streamed block by block into a preallocated array (e.g. a
memory-mapped ``.npy`` opened by the caller), never built whole in memory, with each query's
best documents kept on the way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from saber_core.discovery.per_query import top_neighbours

DEFAULT_BLOCK = 64


@dataclass(frozen=True)
class StreamedScores:
    """Per query the ``k`` best documents (``index`` -1 / ``score`` NaN pad short rows) and the
    mean score over the whole matrix."""

    index: np.ndarray
    score: np.ndarray
    mean: float


def stream_rows(
    out: np.ndarray,
    rows: np.ndarray,
    score_block: Callable[[np.ndarray], np.ndarray],
    neighbours: int,
    block_size: int = DEFAULT_BLOCK,
    progress: Callable[[int, int], None] | None = None,
) -> StreamedScores:
    """Fill ``out[i] = score_block(rows[i : i + block])`` block by block (``out`` (len(rows),
    n_docs)), keeping each row's top ``neighbours`` documents (:func:`top_neighbours`)."""
    k = min(neighbours, out.shape[1])
    index, score = [], []
    for start in range(0, len(rows), block_size):
        values = score_block(rows[start : start + block_size])
        out[start : start + len(values)] = values
        idx, val = top_neighbours(values, k)
        index.append(idx)
        score.append(val)
        if progress:
            progress(start + len(values), len(rows))
    return StreamedScores(
        np.concatenate(index) if index else np.zeros((0, k), dtype=np.int64),
        np.concatenate(score) if score else np.zeros((0, k), dtype=np.float32),
        float(out.mean()) if out.size else 0.0,
    )


def neighbour_frame(
    streamed: StreamedScores, query_ids: Sequence[str], doc_ids: np.ndarray, score: str
) -> pl.DataFrame:
    """``query_id, rank, doc_id, <score>``: each query's kept neighbours (padding dropped)."""
    k = streamed.index.shape[1]
    keep = streamed.index.ravel() >= 0
    return pl.DataFrame(
        {
            "query_id": np.repeat(np.asarray(query_ids, dtype=object), k)[keep],
            "rank": np.tile(np.arange(1, k + 1), len(query_ids))[keep],
            "doc_id": np.asarray(doc_ids, dtype=object)[streamed.index.ravel()[keep]],
            score: streamed.score.ravel()[keep],
        }
    )
