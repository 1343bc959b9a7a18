"""memory::recall's ranking engine: pure functions over an agent's columns, no database.

slots         sorted slot arrays: membership, a posting's packed bits, ranges
block_bounds  the prior's bounds per block of slots
columns       what the engine reads of an agent (`Columns`) and what describes a row
keywords      the query's keywords and their shares of the keyword term
formula       the contract's score, and its prior on given rows
filters       recall's filters, over all rows or on given rows
order         recall's order (score, newer, id) and the best rows so far
topk          the exact top-k without a query vector, skipping blocks by their bounds
codes         sign codes of the vectors and the shortlist they pick
vector_index  when a recall uses the codes, and the shortlist's exact scores
rank          the ranking: which of the above ranks a request
expand        the `expanded` mode: the ranking's top, a memory lifted by its neighbours
trigger       memory::recall's reads and writes around the ranking (core memory, rows, access)

Each module imports only modules listed above it, so there is no cycle; this file imports
nothing, so that importing one module runs no other. The recall index (worker/recall_index/)
imports the engine's types; the engine never imports the worker.
"""
