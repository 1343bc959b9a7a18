"""`memory-worker bench`: the command, its client, corpus, echo floor, eviction and LoCoMo."""
