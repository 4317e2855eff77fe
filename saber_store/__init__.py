"""Storage: the build's DuckDB database with lineage (:mod:`.database`), sharing DuckDB files
between processes (:mod:`.duckdb_files`), the SABER home's layout (:mod:`.paths`) and the input
sources (:mod:`.sources`)."""
