"""Wire structs, errors and SQL migrations: everything that crosses the worker's edges."""
