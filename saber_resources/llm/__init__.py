"""LLM backends behind one interface, and the DuckDB call cache in front of them."""
