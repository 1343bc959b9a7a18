"""`memory-worker bench`'s options: which mode runs and its sizes."""

from __future__ import annotations

import argparse

from worker.bench import index_memory, million, stores
from worker.bench.fairness import add_fairness_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64, help="stores in flight")
    parser.add_argument("--recalls", type=int, default=300, help="sequential recalls timed")
    parser.add_argument(
        "--floor",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also ROUNDS rounds of echo round trips then the sequential recalls: recall p50 "
        "over echo p50, median of the rounds (0: skip)",
    )
    parser.add_argument("--echo", type=int, default=1000, help="echo round trips timed")
    parser.add_argument("--embedder", choices=["builtin", "bus", "none"])
    parser.add_argument("--keyword", choices=["share", "idf", "stems"])
    parser.add_argument("--recall", choices=["formula", "expanded"])
    parser.add_argument(
        "--tenancy",
        choices=["none", "account"],
        default="none",
        help="run the worker with MEMORY_WORKER_TENANCY=account, requests from one tenant",
    )
    parser.add_argument(
        "--evict", type=int, default=10_000, help="memories in sessions to evict (0: skip)"
    )
    parser.add_argument(
        "--filtered",
        type=int,
        default=0,
        help="memories in one agent for recall with a 1%% filter and list paging (0: skip)",
    )
    parser.add_argument(
        "--client",
        type=int,
        default=0,
        help="calls timed for the Python client's overhead over raw nats-py requests (0: skip)",
    )
    parser.add_argument(
        "--mcp",
        type=int,
        default=0,
        help="memory_search calls timed over stdio through `memory-worker mcp` (0: skip)",
    )
    parser.add_argument(
        "--state",
        action="store_true",
        help="only the state beside memories: kv set/get p50, claims/s with 32 claimers, "
        "usage query p50",
    )
    parser.add_argument("--workers", type=int, default=2, help="with --state: workers on one file")
    parser.add_argument(
        "--usage-records", type=int, default=1_000_000, help="with --state: usage rows queried"
    )
    parser.add_argument(
        "--locomo",
        metavar="PATH",
        help="a LoCoMo-format JSON file: the LoCoMo benchmark's data/locomo10.json "
        "(github.com/snap-research/LoCoMo) or some of its conversations; retrieval quality on it",
    )
    parser.add_argument(
        "--sanitize",
        action="store_true",
        help="only the sanitiser: false positives on the --locomo file's turns, cost per turn, "
        "worst adversarial input",
    )
    parser.add_argument(
        "--merge", nargs="?", const="", metavar="PATH",
        help="only consolidate's mergeThreshold: merges on a LoCoMo-format file (as --locomo)",
    )  # fmt: skip
    parser.add_argument(
        "--facts-extraction",
        action="store_true",
        help="only fact extraction: precision and recall over the test set, CPU per text; "
        "with --locomo, the facts found in that file's turns and 50 of them to check by hand",
    )
    parser.add_argument("--facts-set", metavar="PATH", help="with --facts-extraction: a test set")
    parser.add_argument(
        "--topics",
        action="store_true",
        help="only topic assignment: purity, completeness, resume selection and CPU per message "
        "on the interleaved sessions, by keywords and with the builtin model (not with "
        "--embedder none)",
    )
    parser.add_argument("--topics-set", metavar="PATH", help="with --topics: a test set")
    parser.add_argument(
        "--topic-cost",
        action="store_true",
        help="only what topics cost over the bus: store p50 with the topic step vs off (no "
        "embedder unless --embedder), session::resume p50 on a long session, beside the echo",
    )
    parser.add_argument(
        "--topic-stores", type=int, default=400, help="with --topic-cost: stores per round"
    )
    parser.add_argument(
        "--topic-rounds", type=int, default=3, help="with --topic-cost: rounds per mode"
    )
    parser.add_argument(
        "--resume-messages", type=int, default=2000, help="with --topic-cost: session length"
    )
    parser.add_argument(
        "--facts-samples",
        metavar="PATH",
        help="with --facts-extraction --locomo: where the 50 facts to check go "
        "(default /tmp/facts-locomo-samples.txt)",
    )
    parser.add_argument(
        "--sanitize-kib", type=int, default=512, help="size of each adversarial input, KiB"
    )
    parser.add_argument("--nats-url", help="bench the worker serving on this server instead")
    parser.add_argument("--subject-prefix", default="")
    parser.add_argument(
        "--sharded",
        action="store_true",
        help="only sharded mode: 1, 2, 3 shards on a loopback 3-node cluster, failover, log cost",
    )
    parser.add_argument(
        "--scale",
        help="only large agents: one agent of each of these sizes (e.g. 100000,300000,1000000) "
        "written straight into a file; recall with keywords and with vectors, restarts, RSS",
    )
    parser.add_argument(
        "--vector-index",
        help="only the vector index on the --locomo file with the builtin model: exact, then "
        "codes with each of these shortlists (e.g. 50,1000)",
    )
    parser.add_argument(
        "--fact-store",
        action="store_true",
        help="only the fact store: memory::fact::query p50 at --fact-count facts in one agent "
        "beside the echo, stores/s with extraction on vs off",
    )
    parser.add_argument("--fact-count", type=int, default=10_000, help="with --fact-store")
    parser.add_argument(
        "--fact-stores", type=int, default=4000, help="with --fact-store: stores per round"
    )
    parser.add_argument(
        "--fact-rounds",
        type=int,
        default=7,
        help="with --fact-store: alternating rounds, one run of each mode in each",
    )
    parser.add_argument(
        "--fact-every",
        type=int,
        default=3,
        help="with --fact-store: one stored text in this many states a fact (3; LoCoMo's "
        "conversations state one in about 60)",
    )
    index_memory.add_arguments(parser)
    million.add_arguments(parser)
    stores.add_arguments(parser)
    add_fairness_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
