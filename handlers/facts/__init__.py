"""The fact store (contract section 19): facts kept beside memories with their valid time and
record time. keys.py compares and names them, timeline.py keeps each line of values in order,
beliefs.py asserts, ends and retracts, reading.py answers, extract.py finds statements in text."""
