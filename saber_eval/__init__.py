"""Retriever evaluation on a SABER benchmark directory (Dagster-free).

A benchmark directory in the export format (``queries.jsonl`` + ``corpus.jsonl``) is evaluated
per retriever and task setting: a TREC run file, per-query nDCG@10 (exponential gain, ideal over
all candidates — ``saber_core.evaluation.metrics``), per-domain means and the median wall-clock
latency per
reranking task, and nDCG@10_trec (trec_eval's linear gain on the exported integer qrels).
Results accumulate in a leaderboard (DuckDB table, CSV, Markdown, plots) with paired-bootstrap
intervals and a rank-stability table (adjacent-pair tests, Holm-adjusted), can be logged to
MLflow, and two retrievers can be compared with a paired randomization test. The benchmark can
be written as an MTEB task and evaluated by the real ``mteb`` package (``--via mteb``), and the
leaderboard correlated with given MTEB scores (Pearson, Spearman, Kendall; all models and those
released since a date). The released SaberMath schema is read from a folder or from the Hugging
Face hub (``hf:NAME``).

Modules: ``benchmark`` (loading, settings, texts), ``loading`` and ``sabermath_format``
(benchmark folders, the released schema, ``hf:``), ``registry`` (``retrievers.yaml``, input
envelopes, extra registry files), ``cache`` (embedding cache keyed by the exact text sent),
``retrievers``, ``runner`` (timing, metrics, run outputs), ``runfile`` (TREC run files),
``leaderboard``, ``plots`` (incl. the Pareto frontier), ``significance``, ``stability``
(intervals, rank stability, Holm), ``mteb_task`` (MTEB task and ``--via mteb``),
``correlation`` (SABER vs MTEB), ``tracking`` (MLflow), ``version`` (the evaluation code's
hash), ``cli`` (``eval_main``).
"""
