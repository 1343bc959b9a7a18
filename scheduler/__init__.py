"""Cron-driven maintenance: the job table and the runner that fires jobs through dispatch."""
