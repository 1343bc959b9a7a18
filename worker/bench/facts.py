"""`memory-worker bench --facts-extraction`: how well and how cheaply stored text is read for
facts (handlers/facts/extract.py, contract section 19).

Figures, all in this process (extraction is a pure function; the bus adds nothing to it):
precision and recall over the hand-written test set (tests/fixtures/facts_sentences.jsonl:
every phrasing, and questions, conditionals, wishes and plans, and statements about someone
else that must give nothing), the non-facts of each kind that gave a statement, and the CPU
time per text (thread time: the waits of a shared machine are not the extractor's). With
--locomo, the facts found in every turn of that file, by predicate, and a seeded random sample
of them with their sentences, written to a file for checking by hand.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from handlers.facts.extract import Statement, extract_statements, sentences
from handlers.sanitize import sanitize

TEST_SET = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "facts_sentences.jsonl"
SAMPLES = Path("/tmp/facts-locomo-samples.txt")
EXAMPLES = 5


class Case(msgspec.Struct, frozen=True):
    """One sentence of the test set: `kind` is fact, question, conditional, wish or
    someone_else; `expect` the statements it makes (none but for facts)."""

    text: str
    kind: str
    expect: list[Statement]
    phrasing: str = ""


def load_cases(path: Path) -> list[Case]:
    decoder = msgspec.json.Decoder(Case)
    lines = path.read_text(encoding="utf-8").splitlines()
    return [decoder.decode(line) for line in lines if line.strip()]


def score(cases: list[Case]) -> dict[str, Any]:
    """Precision and recall over every statement expected and found (predicate, object and
    `ends` all equal), and the sentences of each kind that gave a wrong statement."""
    right = wrong = missed = 0
    by_kind: Counter[str] = Counter(case.kind for case in cases)
    wrong_by_kind: Counter[str] = Counter()
    examples: dict[str, list[str]] = {"wrong": [], "missed": []}
    for case in cases:
        expected, found = set(case.expect), set(extract_statements(case.text))
        right += len(expected & found)
        wrong += len(found - expected)
        missed += len(expected - found)
        if found - expected:
            wrong_by_kind[case.kind] += 1
            if len(examples["wrong"]) < EXAMPLES:
                examples["wrong"].append(f"{case.text} -> {_said(found - expected)}")
        if expected - found and len(examples["missed"]) < EXAMPLES:
            examples["missed"].append(f"{case.text} -> {_said(expected - found)}")
    return {
        "sentences": len(cases),
        "by_kind": dict(by_kind),
        "statements_expected": right + missed,
        "statements_found": right + wrong,
        "right": right,
        "precision": round(right / max(right + wrong, 1), 4),
        "recall": round(right / max(right + missed, 1), 4),
        "wrong_by_kind": {kind: wrong_by_kind[kind] for kind in by_kind},
        "examples": examples,
    }


def _said(statements: set[Statement]) -> str:
    return "; ".join(
        f"{s.predicate}{' (ends)' if s.ends else ''} = {s.object}"
        for s in sorted(statements, key=lambda s: (s.predicate, s.object))
    )


def cost(
    texts: list[str], rounds: int = 5, read: Callable[[str], object] = extract_statements
) -> dict[str, float]:
    """CPU microseconds per text (thread time, every text `rounds` times)."""
    latencies = []
    for _ in range(rounds):
        for text in texts:
            started = time.thread_time_ns()
            read(text)
            latencies.append((time.thread_time_ns() - started) / 1000)
    values = sorted(latencies)
    return {
        "p50_us": round(values[len(values) // 2], 1),
        "p99_us": round(values[min(len(values) - 1, len(values) * 99 // 100)], 1),
    }


def locomo_turns(path: Path) -> list[dict[str, str]]:
    """Every turn of a LoCoMo-format file: conversation, dia_id, speaker, text."""
    found = []
    for number, sample in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        conversation = sample["conversation"]
        for key in sorted(
            (k for k in conversation if re.fullmatch(r"session_\d+", k)),
            key=lambda k: int(k.split("_")[1]),
        ):
            for turn in conversation[key]:
                found.append(
                    {
                        "conversation": str(sample.get("sample_id", number)),
                        "dia_id": turn["dia_id"],
                        "speaker": turn["speaker"],
                        "text": turn["text"],
                    }
                )
    return found


def locomo_facts(path: Path, samples: Path, count: int = 50, seed: int = 34) -> dict[str, Any]:
    """The facts found in every turn, by predicate ("/end" for ends), and `count` of them at
    random (seeded), each with the sentence it came from, written to `samples`."""
    turns = locomo_turns(path)
    texts = [turn["text"] for turn in turns]
    facts: list[dict[str, Any]] = []
    with_fact = 0
    for turn in turns:
        found = extract_statements(turn["text"])
        with_fact += bool(found)
        for statement in found:
            facts.append({**turn, **msgspec.structs.asdict(statement)})
            facts[-1]["sentence"] = _source(turn["text"], statement)
    by_predicate = Counter(f["predicate"] + ("/end" if f["ends"] else "") for f in facts)
    chosen = random.Random(seed).sample(facts, min(count, len(facts)))
    samples.write_text(_samples_text(chosen), encoding="utf-8")
    return {
        "locomo": str(path),
        "turns": len(turns),
        "turns_with_a_fact": with_fact,
        "facts": len(facts),
        "by_predicate": dict(by_predicate.most_common()),
        "per_turn": cost(texts, rounds=3),
        # The sanitiser reads every stored text too: the same turns, the same clock.
        "sanitize_per_turn": cost(texts, rounds=3, read=lambda text: sanitize(text, "redact")),
        "samples": str(samples),
        "samples_written": len(chosen),
    }


def _source(text: str, statement: Statement) -> str:
    for start, end in sentences(text):
        if statement in extract_statements(text[start:end]):
            return text[start:end].strip()
    return text


def _samples_text(chosen: list[dict[str, Any]]) -> str:
    lines = ["# LoCoMo facts for checking by hand: mark each line right or wrong", ""]
    for number, fact in enumerate(chosen, 1):
        ends = " (ends)" if fact["ends"] else ""
        lines.append(f"{number}. {fact['predicate']}{ends} = {fact['object']!r}")
        lines.append(
            f"   {fact['conversation']} {fact['dia_id']} {fact['speaker']}: {fact['sentence']}"
        )
    return "\n".join(lines) + "\n"


def measure_facts(test_set: Path, locomo: Path | None, samples: Path) -> dict[str, Any]:
    cases = load_cases(test_set)
    results: dict[str, Any] = {
        "test_set": str(test_set),
        **score(cases),
        "per_text": cost([case.text for case in cases]),
    }
    if locomo is not None:
        results["locomo"] = locomo_facts(locomo, samples)
    return results


def facts_table(results: dict[str, Any]) -> str:
    kinds = results["by_kind"]
    lines = [
        f"facts test set: {results['test_set']}",
        "sentences  " + ", ".join(f"{kind} {n}" for kind, n in kinds.items()),
        f"precision / recall  {results['precision']} / {results['recall']} "
        f"({results['right']} right of {results['statements_found']} found, "
        f"{results['statements_expected']} expected)",
        "sentences with a wrong statement  "
        + ", ".join(f"{kind} {results['wrong_by_kind'][kind]} of {n}" for kind, n in kinds.items()),
        *(f"  wrong: {example}" for example in results["examples"]["wrong"]),
        *(f"  missed: {example}" for example in results["examples"]["missed"]),
        f"extraction CPU us per text p50 / p99  {results['per_text']['p50_us']} / "
        f"{results['per_text']['p99_us']}",
    ]
    if "locomo" in results:
        found = results["locomo"]
        lines += [
            f"LoCoMo: {found['locomo']}",
            f"LoCoMo turns / with a fact / facts  {found['turns']} / {found['turns_with_a_fact']}"
            f" / {found['facts']}",
            *(f"  {predicate}  {n}" for predicate, n in found["by_predicate"].items()),
            f"LoCoMo extraction CPU us per turn p50 / p99  {found['per_turn']['p50_us']} / "
            f"{found['per_turn']['p99_us']}",
            f"LoCoMo sanitiser CPU us per turn p50 / p99 (for scale)  "
            f"{found['sanitize_per_turn']['p50_us']} / {found['sanitize_per_turn']['p99_us']}",
            f"{found['samples_written']} facts to check by hand  {found['samples']}",
        ]
    return "\n".join(lines)


def run_facts(args: Any) -> int:
    """`bench --facts-extraction`: a pure function, measured in this process."""
    test_set = Path(args.facts_set) if args.facts_set else TEST_SET
    if not test_set.is_file():
        print(f"no facts test set at {test_set}: give one with --facts-set", file=sys.stderr)
        return 2
    locomo = Path(args.locomo) if args.locomo else None
    samples = Path(args.facts_samples) if args.facts_samples else SAMPLES
    results = measure_facts(test_set, locomo, samples)
    print(json.dumps(results) if args.json else facts_table(results))
    return 0
