"""Every table of the database, registered once (table.py says what a registration holds;
registered.py collects them)."""
