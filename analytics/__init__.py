"""Analytics: the DuckDB projection of the log, the frontier, SQL, dataset replay and reports."""
