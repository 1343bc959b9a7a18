"""One module per feature, each exporting its rows of the trigger table (worker/route.py says
what a row is; worker/registry.py assembles the table)."""
