"""Retriever engines, one module per family; the table of them is ``saber_eval.retrievers``."""
