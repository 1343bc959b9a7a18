"""`memory-worker bench` runs end to end on its own embedded stack and reports every figure."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import worker_config
from worker.app import App

TINY_LOCOMO = [
    {
        "sample_id": "tiny",
        "conversation": {
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy called Rex."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "The budget review is on Friday."},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "We hiked up Mount Tam together."},
            ],
        },
        "qa": [
            {"question": "What is the puppy called?", "evidence": ["D1:1"], "category": 1},
            {"question": "When is the budget review?", "evidence": ["D1:2; D1:9"], "category": 2},
            {"question": "Who never spoke?", "evidence": [], "category": 5},
        ],
    }
]


@pytest.mark.slow
def test_bench_prints_store_recall_echo_rss_and_locomo_figures(tmp_path: Path) -> None:
    """A small run with --json: every figure is present (the Python client's against raw
    requests, and the MCP round trip, too), positive where it must be, and the tiny LoCoMo
    file's two answerable questions are both found in the top 5."""
    locomo = tmp_path / "tiny.json"
    locomo.write_text(json.dumps(TINY_LOCOMO), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "worker", "bench", "--embedder", "none", "--memories", "200",
         "--recalls", "20", "--echo", "50", "--evict", "300", "--filtered", "300", "--json",
         "--client", "30", "--mcp", "20", "--locomo", str(locomo)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["memories"] == 200 and results["embedder"] == "none"
    for figure in ("echo", "store", "recall", "context"):
        assert 0 < results[figure]["p50_ms"] <= results[figure]["p99_ms"]
    # Recalls one after another while 8 stores per recall stream in: the first starts before
    # the stores can have finished, and there are at most --recalls of them.
    mixed = results["recall_while_storing"]
    assert 1 <= mixed["recalls"] <= 20
    assert 0 < mixed["p50_ms"] <= mixed["p99_ms"]
    assert results["store"]["per_second"] > 0
    assert results["recall"]["p50_vs_echo"] > 0
    assert results["rss_before_mb"] > 0 and results["rss_after_mb"] > 0
    eviction = results["eviction"]
    assert eviction["evicted"] == 300 and eviction["per_second"] > 0
    assert eviction["stores_during"] >= 1
    assert 0 < eviction["store_during"]["p50_ms"] <= eviction["store_during"]["max_ms"]
    filtered = results["filtered"]
    assert filtered["list"]["memories"] == 300 and filtered["list"]["per_second"] > 0
    for figure in ("recall", "recall_metadata_1pct", "recall_window_1pct"):
        assert 0 < filtered[figure]["p50_ms"] <= filtered[figure]["p99_ms"]
    overhead = results["client_overhead"]
    assert overhead["calls"] == 30
    for trigger in ("get", "recall"):
        for path in ("raw", "client"):
            assert 0 < overhead[trigger][path]["p50_ms"] <= overhead[trigger][path]["p99_ms"]
        assert overhead[trigger]["ratio"] > 0
    trip = results["mcp"]
    assert trip["calls"] == 20
    assert 0 < trip["memory_search"]["p50_ms"] <= trip["memory_search"]["p99_ms"]
    quality = results["locomo"]
    assert quality["questions"] == 2
    assert quality["recall@5"] == 1.0 and quality["recall@10"] == 1.0
    assert quality["stores_per_second"] > 0


async def test_bench_measures_a_running_worker_given_by_nats_url_and_subject_prefix(
    nats_url: str, tmp_path: Path
) -> None:
    """With --nats-url the bench measures the worker already there (under its subject prefix)
    and still finds its own echo responder, which subscribes after that worker answers."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", subject_prefix="prod."))
    await app.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "worker", "bench", "--nats-url", nats_url,
            "--subject-prefix", "prod.", "--embedder", "none", "--memories", "100",
            "--recalls", "10", "--echo", "20", "--evict", "0", "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    finally:
        await app.stop()
    assert process.returncode == 0, err.decode()
    results = json.loads(out.decode().strip().splitlines()[-1])
    assert results["echo"]["p50_ms"] > 0 and results["recall"]["p50_ms"] > 0
    assert results["store"]["per_second"] > 0


def test_bench_sanitize_prints_false_positives_cost_per_turn_and_the_worst_adversarial_input(
    tmp_path: Path,
) -> None:
    """--sanitize measures the sanitiser alone: the tiny file's ordinary turns come through
    untouched, a turn holding an address is counted under its rule, and the cost and the worst
    of the adversarial inputs (small here) are printed, as a table and as JSON."""
    sample = json.loads(json.dumps(TINY_LOCOMO[0]))
    sample["conversation"]["session_1"].append(
        {"speaker": "Bob", "dia_id": "D1:4", "text": "Mail me at bob@example.com please."}
    )
    locomo = tmp_path / "tiny.json"
    locomo.write_text(json.dumps([sample]), encoding="utf-8")
    command = [sys.executable, "-m", "worker", "bench", "--sanitize", "--sanitize-kib", "8",
               "--locomo", str(locomo)]  # fmt: skip
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    found = results["false_positives"]
    assert found["turns"] == 4 and found["touched"] == 1 and found["by_rule"] == {"email": 1}
    assert "bob@example.com" in found["examples"]["email"][0]
    assert results["ordinary_numbers"]["touched"] == 0
    assert 0 < results["order_numbers_as_cards"] < 0.2
    assert 0 < results["per_turn"]["p50_us"] <= results["per_turn"]["p99_us"]
    worst = results["adversarial"]
    assert worst["size"] == 8192 and worst["worst_input"] in worst["seconds"]
    assert worst["worst_s"] == max(worst["seconds"].values())
    table = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert "LoCoMo turns: changed or flagged  1 of 4" in table.stdout
    assert "sanitize(turn) p50 / p99 / max us" in table.stdout
    assert "worst adversarial 8 KiB input" in table.stdout


def test_bench_merge_prints_merges_per_threshold_with_examples(tmp_path: Path) -> None:
    """--merge stores the file's turns and merges at each threshold on a fresh copy: with the
    hash model (words, any order) a turn repeated in other words is merged at every threshold,
    and the example shows the newer turn kept."""
    sample = json.loads(json.dumps(TINY_LOCOMO[0]))
    sample["conversation"]["session_1"].append(
        {"speaker": "Ann", "dia_id": "D1:4", "text": "A puppy called Rex, I adopted."}
    )
    locomo = tmp_path / "tiny.json"
    locomo.write_text(json.dumps([sample]), encoding="utf-8")
    env = {**os.environ, "MEMORY_WORKER_BUILTIN_MODEL": "hash"}
    command = [sys.executable, "-m", "worker", "bench", "--merge", str(locomo)]
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120,
                          env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["memories"] == 4 and results["model"] == "hash-256-v1"
    assert [run["threshold"] for run in results["runs"]] == [0.9, 0.95, 0.98, 0.99]
    assert [run["merged"] for run in results["runs"]] == [1, 1, 1, 1]
    [example] = results["runs"][-1]["examples"]
    assert example["kept"] == "Ann: A puppy called Rex, I adopted."
    assert example["merged"] == "Ann: I adopted a puppy called Rex."
    table = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert table.returncode == 0, table.stderr
    assert "4 memories (one per turn), vectors of hash-256-v1" in table.stdout


def test_bench_index_memory_prints_rss_after_loading_after_the_saver_and_idle() -> None:
    """`--index-memory N`: N agents of one memory with vectors stored and recalled; the worker's
    RSS at each step, every agent loaded (they fit the budget) and given a snapshot."""
    done = subprocess.run(
        [sys.executable, "-m", "worker", "bench", "--index-memory", "30", "--budget", "64",
         "--runs", "1", "--idle", "0", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    [run] = results["runs"]
    for figure in ("start", "stored", "loaded", "saved", "idle"):
        assert run[f"rss_{figure}_mb"] > 0
    assert run["without_vector"] == 0
    assert run["agents_loaded"] == 30 and run["snapshots"] == 30


def test_bench_fairness_measures_another_tenants_recall_and_store_quiet_and_flooded() -> None:
    """`--fairness`: over real NATS accounts, TEAM_B's recall and store are timed quiet and
    while TEAM_A floods, each phase answering every round and the echo floor measured."""
    done = subprocess.run(
        [sys.executable, "-m", "worker", "bench", "--fairness", "--embedder", "none",
         "--flood", "20", "--seconds", "1", "--settle", "0.3", "--backlog", "50",
         "--fair-memories", "20", "--echo", "10", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["flood"] == 20 and results["echo"]["p50_ms"] > 0
    for phase in ("quiet", "flooded"):
        assert results[phase]["rounds"] > 0 and results[phase]["timeouts"] == 0
        assert 0 < results[phase]["recall"]["p50_ms"] <= results[phase]["recall"]["p99_ms"]
        assert results[phase]["store"]["p50_ms"] > 0


def test_bench_facts_extraction_prints_precision_recall_cost_and_locomo_facts(
    tmp_path: Path,
) -> None:
    """--facts-extraction scores the facts test set (precision and recall at the issue's bar,
    60 sentences of each kind of non-fact, none wrong) and its CPU per text; with --locomo it
    counts the facts in the file's turns by predicate and writes them, with their sentences,
    for checking by hand; as JSON and as a table."""
    sample = json.loads(json.dumps(TINY_LOCOMO[0]))
    sample["conversation"]["session_1"] += [
        {"speaker": "Ann", "dia_id": "D1:4", "text": "Big news! I moved to Denver last year."},
        {"speaker": "Bob", "dia_id": "D1:5", "text": "My sister lives in Rome."},
        {"speaker": "Bob", "dia_id": "D1:6", "text": "I love hiking, do you?"},
        {"speaker": "Ann", "dia_id": "D1:7", "text": "Do you like jazz? If I like it, I'll go."},
    ]
    locomo = tmp_path / "tiny.json"
    locomo.write_text(json.dumps([sample]), encoding="utf-8")
    samples = tmp_path / "samples.txt"
    command = [sys.executable, "-m", "worker", "bench", "--facts-extraction", "--locomo",
               str(locomo), "--facts-samples", str(samples)]  # fmt: skip
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["sentences"] >= 200
    assert results["precision"] >= 0.95 and results["recall"] >= 0.90
    for kind in ("question", "conditional", "wish", "someone_else"):
        assert results["by_kind"][kind] >= 60 and results["wrong_by_kind"][kind] == 0
    assert 0 < results["per_text"]["p50_us"] <= results["per_text"]["p99_us"]
    found = results["locomo"]
    assert found["turns"] == 7 and found["turns_with_a_fact"] == 2 and found["facts"] == 2
    assert found["by_predicate"] == {"lives_in": 1, "likes": 1}
    assert found["per_turn"]["p50_us"] > 0 and found["sanitize_per_turn"]["p50_us"] > 0
    written = samples.read_text(encoding="utf-8")
    assert "lives_in = 'Denver'" in written and "Ann: Big news! I moved to Denver" not in written
    assert "D1:4 Ann: I moved to Denver last year." in written
    assert "likes = 'hiking'" in written
    table = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert "precision / recall  " in table.stdout
    assert "LoCoMo turns / with a fact / facts  7 / 2 / 2" in table.stdout
    assert f"2 facts to check by hand  {samples}" in table.stdout


def test_bench_fact_store_prints_query_p50_beside_the_echo_and_stores_per_second_on_and_off() -> (
    None
):
    """--fact-store on small sizes: the query's p50 and its ratio to the echo measured in the same
    run, and stores per second with extraction on and off (their ratio), with each worker's CPU
    per store (their ratio), for the share of fact-stating texts asked (--fact-every)."""
    command = [sys.executable, "-m", "worker", "bench", "--fact-store", "--fact-count", "200",
               "--fact-stores", "600", "--fact-rounds", "1", "--echo", "50", "--fact-every",
               "60", "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["facts"] == 200 and results["echo"]["p50_ms"] > 0
    query = results["query_by_subject"]
    assert query["p50_vs_echo"] == round(query["p50_ms"] / results["echo"]["p50_ms"], 2)
    stores = results["stores_per_second"]
    assert stores["extract"] > 0 and stores["off"] > 0 and stores["rounds"] == 1
    assert stores["fact_every"] == 60
    [ratio] = stores["ratios"]  # one round: its ratio is the median
    assert stores["ratio"] == ratio
    assert abs(ratio / (stores["extract"] / stores["off"]) - 1) < 0.05  # rates are rounded
    assert stores["cpu_us_extract"] > 0 and stores["cpu_us_off"] > 0
    [cpu_ratio] = stores["cpu_ratios"]
    assert stores["cpu_ratio"] == cpu_ratio
    assert abs(cpu_ratio / (stores["cpu_us_extract"] / stores["cpu_us_off"]) - 1) < 0.05


def test_bench_topics_prints_purity_completeness_resume_and_cost() -> None:
    """--topics scores the interleaved sessions by keywords and with the builtin model's
    vectors: purity, completeness and resume selection at the issue's bar with vectors, near
    it by keywords, and the CPU per message placed, on the tuned set and on the held-out one;
    as JSON and as a table."""
    command = [sys.executable, "-m", "worker", "bench", "--topics"]
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    words, meaning = results["keywords"], results["vectors"]
    assert words["sessions"] >= 40 and words["messages"] == meaning["messages"] >= 1000
    assert meaning["model"] == "MiniLM"
    assert meaning["purity"] >= 0.9 and meaning["completeness"] >= 0.9
    assert words["purity"] >= 0.89 and words["completeness"] >= 0.89
    assert words["resume_hit_rate"] >= 0.9 and meaning["resume_hit_rate"] >= 0.9
    for found in (words, meaning):
        assert 0 < found["assign_us"]["p50_us"] <= found["assign_us"]["p99_us"]
    held_words, held_meaning = results["held_out"]["keywords"], results["held_out"]["vectors"]
    assert held_words["test_set"].endswith("topic_sessions_heldout.jsonl")
    assert held_words["sessions"] >= 40 and held_meaning["messages"] == held_words["messages"]
    assert held_words["purity"] >= 0.86 and held_words["completeness"] >= 0.86
    assert held_meaning["purity"] >= 0.9 and held_meaning["completeness"] >= 0.9
    table = subprocess.run(
        [*command, "--embedder", "none"], capture_output=True, text=True, timeout=300
    )
    assert table.returncode == 0, table.stderr
    assert "keywords: purity / completeness  " in table.stdout
    assert "keywords: assignment CPU us per message p50 / p99  " in table.stdout
    assert "held-out set: " in table.stdout and "topic_sessions_heldout.jsonl" in table.stdout
    assert "vectors" not in table.stdout


def test_bench_stores_prints_stores_per_second_in_flight_the_lone_p50_and_the_echo() -> None:
    """`--stores`: stores over the bus alone at `--in-flight`, the worker's CPU per store (and
    its event loop's, the client's and nats-server's) and the p50 of stores one at a time,
    beside the NATS echo; every figure of every run."""
    done = subprocess.run(
        [sys.executable, "-m", "worker", "bench", "--stores", "--embedder", "none",
         "--memories", "200", "--in-flight", "8", "--runs", "1", "--echo", "10", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["in_flight"] == 8 and results["memories"] == 200
    [run] = results["runs"]
    for figure in ("per_second", "worker_cpu_us", "alone_p50_ms", "echo_p50_ms"):
        assert run[figure] > 0 and results["median"][figure] == run[figure]
    # Where else the CPU went: the worker's event loop thread, the bench client, nats-server
    # (the last two share the machine with the worker; /proc counts in 10 ms ticks).
    assert run["client_cpu_us"] > 0
    assert run["loop_cpu_us"] >= 0 and run["nats_cpu_us"] >= 0


def test_bench_topic_cost_prints_store_p50_with_and_without_topics_and_resume_p50() -> None:
    """--topic-cost on small sizes: store p50 with the topic step and with it off (their ratio,
    per round and the median), each worker's CPU per store (and their ratio), resume's p50 on
    a session of --resume-messages, and the echo's p50 measured in the same run; as JSON and
    as a table."""
    command = [sys.executable, "-m", "worker", "bench", "--topic-cost", "--topic-stores", "30",
               "--topic-rounds", "2", "--resume-messages", "50", "--echo", "30"]  # fmt: skip
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["embedder"] == "none" and results["stores"] == 30 and results["rounds"] == 2
    stores = results["store_p50_ms"]
    assert stores["assign"] > 0 and stores["off"] > 0 and results["echo_p50_ms"] > 0
    assert len(results["ratios"]) == 2 and min(results["ratios"]) <= results["ratio"]
    cpu = results["cpu_us_per_store"]
    assert cpu["assign"] > 0 and cpu["off"] > 0 and len(results["cpu_ratios"]) == 2
    assert min(results["cpu_ratios"]) <= results["cpu_ratio"] <= max(results["cpu_ratios"])
    resume = results["resume"]
    assert resume["messages"] == 50 and resume["active"]["p50_ms"] > 0 and resume["chars"] > 0
    assert resume["p50_vs_echo"] == round(resume["active"]["p50_ms"] / results["echo_p50_ms"], 2)
    table = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr
    assert "store p50 ms with topics vs off  " in table.stdout
    assert "worker CPU us per store with topics vs off  " in table.stdout
    assert "session::resume p50 ms, 50 messages  " in table.stdout
