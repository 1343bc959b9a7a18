"""The recall index: per-agent scoring columns in memory, their postings, and the backfill of
vectors."""
