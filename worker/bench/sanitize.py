"""`memory-worker bench --sanitize`: what the sanitiser (handlers/sanitize.py) costs a store and
what it wrongly touches in ordinary conversation.

Three figures, all in this process (the sanitiser is a pure function, the bus adds nothing to
it): the LoCoMo turns that `redact` mode changes or flags, by rule, with examples (every one is
a false positive: the conversations hold no secrets or personal data); p50 and p99 of one
turn's sanitising; and the worst time over adversarial inputs built from each rule family's own
alphabet, the inputs a backtracking pattern would choke on.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from handlers.sanitize import sanitize
from handlers.sanitize_rules import FLAGGING, REDACTING
from worker.bench.locomo import turns

EXAMPLES_PER_RULE = 3
CONTEXT = 60

# One repeated unit (or a head and a long tail) per rule family: each keeps a pattern's prefix
# matching while its end never comes, or offers a match start at every position.
UNITS: dict[str, tuple[str, str]] = {
    "email: a@a@a@": ("", "a@"),
    "email: local part without @": ("", "a.b_c+d%e-f"),
    "email: endless domain labels": ("user@", "a."),
    "digits: one long run": ("", "4"),
    "digits: spaced": ("", "4 "),
    "digits: dashed": ("", "12-"),
    "phone: +1 +1 +1": ("", "+1 "),
    "phone: (555) (555)": ("", "(555) "),
    "phone: 0 00 00": ("", "0 00 "),
    "iban: DE89 AAAA AAAA": ("DE89", " AAAA"),
    "iban: country codes": ("", "DE89"),
    "pem: BEGIN without END": ("", "-----BEGIN RSA PRIVATE KEY-----\n"),
    "pem: one BEGIN, endless body": ("-----BEGIN PRIVATE KEY-----\n", "QUJD ,:.\n"),
    "pem: dashes": ("", "-"),
    "jwt: eyJ repeated": ("", "eyJ"),
    "jwt: eyJ segments without a third": ("", "eyJhbGciOiJIUzI1NiJ9.eyJ"),
    "keys: sk- repeated": ("", "sk-"),
    "keys: sk- and an endless token": ("sk-", "a1B2"),
    "keys: prefixes": ("", "ghp_xoxb-AKIAsk-ant-github_pat_"),
    "bearer: repeated": ("", "Bearer "),
    "bearer: endless token": ("Bearer ", "aB3."),
    "url password: ://a:": ("", "://a:"),
    "assigned: password= repeated": ("", "password="),
    "assigned: name prefixes": ("", "db_api_x_"),
    "assigned: endless value": ("token=", "aB3$"),
    "injection: ignore all the": ("", "ignore all the "),
    "injection: reveal the the": ("", "reveal the "),
    "injection: role header fragments": ("", "<|im_<<SYS[INST\n### "),
}


def adversarial_inputs(size: int, seed: int = 17) -> dict[str, str]:
    """Each family's input of `size` characters, and random text dense in digits and `@`."""
    inputs = {}
    for name, (head, unit) in UNITS.items():
        inputs[name] = (head + unit * (size // len(unit) + 1))[:size]
    rng = random.Random(seed)
    alphabet = "0123456789" * 4 + "@@@@.-+ ()_:=" + "abcxyzAKIE"
    inputs["random: digits and @"] = "".join(rng.choice(alphabet) for _ in range(size))
    return inputs


def find_locomo(given: str | None) -> Path | None:
    """The file given, else a dev split at shared/bench/locomo-dev.json beside the working
    directory or beside the repository, where the development machines keep one (a clone has
    none: the docs say to give --locomo)."""
    if given:
        return Path(given)
    relative = Path("shared", "bench", "locomo-dev.json")
    for base in (Path.cwd().parent, Path(__file__).resolve().parents[3]):
        if (base / relative).is_file():
            return base / relative
    return None


def locomo_texts(path: Path) -> list[str]:
    samples = json.loads(path.read_text(encoding="utf-8"))
    return [content for sample in samples for _, content, _ in turns(sample)]


MONTHS = "January February March April May June July August September October November December"


def ordinary_numbers(count: int, seed: int = 17) -> list[str]:
    """Sentences dense in the numbers conversation holds and no phone or card: dates, years,
    times, prices, versions, counts, addresses. LoCoMo's turns hold few digits (23 of 2080)."""
    rng = random.Random(seed)
    n = rng.randint
    month = MONTHS.split()
    makers = (
        lambda: (
            f"We met on {n(1990, 2030)}-{n(1, 12):02}-{n(1, 28):02} at {n(0, 23)}:{n(0, 59):02}."
        ),
        lambda: (
            f"It was {n(1, 28)} {rng.choice(month)} {n(1990, 2030)}, {n(1, 12)}:{n(0, 59):02} pm."
        ),
        lambda: (
            f"Due {n(1, 28):02}/{n(1, 12):02}/{n(1990, 2030)} or {n(1, 12):02}-{n(1, 28):02}-"
            f"{n(1990, 2030)} or {n(1, 28):02}.{n(1, 12):02}.{n(1990, 2030)}."
        ),
        lambda: (
            f"From {n(8, 11)}:{n(0, 59):02}-{n(12, 18)}:{n(0, 59):02}, "
            f"{n(1900, 2020)}-{n(2021, 2030)}, in the {n(190, 202)}0s."
        ),
        lambda: (
            f"It cost ${n(1, 999)},{n(0, 999):03}.{n(0, 99):02}, then €{n(1, 99)} "
            f"{n(0, 999):03},{n(0, 99):02}, then {n(1, 9)} {n(0, 999):03} {n(0, 999):03} yen."
        ),
        lambda: (
            f"Upgrade to v{n(0, 9)}.{n(0, 30)}.{n(0, 99)} at "
            f"{n(1, 255)}.{n(0, 255)}.{n(0, 255)}.{n(1, 254)}:{n(1024, 65535)}."
        ),
        lambda: (
            f"{n(1, 99_999):,} people ran {n(1, 42)}.{n(0, 9)} km in {n(1, 5)}:{n(0, 59):02}:"
            f"{n(0, 59):02}, {n(1, 100)}% of them, score {n(0, 9)}-{n(0, 9)}."
        ),
        lambda: (
            f"Room {n(100, 9999)}, {n(1, 999)} Main Street, ZIP {n(10000, 99999)}, "
            f"flight {rng.choice('ABLU')}{rng.choice('AXYH')} {n(10, 9999)}, seat {n(1, 40)}C."
        ),
        lambda: (
            f"{n(1, 1_000_000_000)} and {n(1, 999)} {n(100, 999)} {n(100, 999)} and "
            f"{n(1, 99)}.{n(100, 999)}.{n(100, 999)} visitors, ISBN 978-{n(0, 9)}-{n(10, 99)}-"
            f"{n(100000, 999999)}-{n(0, 9)}."
        ),
    )
    return [rng.choice(makers)() for _ in range(count)]


def order_numbers_taken_for_cards(count: int, seed: int = 17) -> float:
    """The share of random 16-digit order numbers redacted as cards: the price of catching
    unseparated cards, as Luhn passes one number in ten (the network digit halves that)."""
    rng = random.Random(seed)
    numbers = [f"order {rng.randrange(10**15, 10**16)} shipped" for _ in range(count)]
    return sum("card" in sanitize(t, "redact").redactions for t in numbers) / count


def _around(text: str, rule_name: str) -> str:
    """The text around the rule's first match, so a reader sees why it fired."""
    rule = next(r for r in (*REDACTING, *FLAGGING) if r.name == rule_name)
    match = rule.pattern.search(text)
    if match is None:  # matched only after an earlier rule's placeholder: show the start
        return text[: 2 * CONTEXT]
    return text[max(0, match.start() - CONTEXT) : match.end() + CONTEXT]


def false_positives(texts: list[str]) -> dict[str, Any]:
    touched = 0
    by_rule: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    for text in texts:
        result = sanitize(text, "redact")
        if result.text != text or result.flags:
            touched += 1
        for name in result.rules:
            by_rule[name] += 1
            if len(examples[name]) < EXAMPLES_PER_RULE:
                examples[name].append(_around(text, name))
    return {
        "turns": len(texts),
        "touched": touched,
        "by_rule": dict(by_rule.most_common()),
        "examples": dict(examples),
    }


def turn_cost(texts: list[str], rounds: int = 3) -> dict[str, float]:
    """Microseconds per turn: a turn costs far less than the millisecond `percentiles` rounds
    to."""
    latencies = []
    for _ in range(rounds):
        for text in texts:
            started = time.perf_counter()
            sanitize(text, "redact")
            latencies.append((time.perf_counter() - started) * 1e6)
    values = sorted(latencies)
    return {
        "p50_us": round(values[len(values) // 2], 1),
        "p99_us": round(values[min(len(values) - 1, len(values) * 99 // 100)], 1),
        "max_us": round(values[-1], 1),
    }


def worst_case(size: int) -> dict[str, Any]:
    """The slowest of the adversarial inputs (best of two runs each, to spare the noise of a
    shared machine) and every input's time."""
    seconds = {}
    for name, text in adversarial_inputs(size).items():
        runs = []
        for _ in range(2):
            started = time.perf_counter()
            sanitize(text, "redact")
            runs.append(time.perf_counter() - started)
        seconds[name] = round(min(runs), 4)
    worst = max(seconds, key=lambda name: seconds[name])
    return {"size": size, "worst_input": worst, "worst_s": seconds[worst], "seconds": seconds}


def measure_sanitize(locomo: Path, adversarial_size: int) -> dict[str, Any]:
    texts = locomo_texts(locomo)
    return {
        "locomo": str(locomo),
        "false_positives": false_positives(texts),
        "ordinary_numbers": false_positives(ordinary_numbers(2000)),
        "order_numbers_as_cards": round(order_numbers_taken_for_cards(2000), 4),
        "per_turn": turn_cost(texts),
        "adversarial": worst_case(adversarial_size),
    }


def _found_lines(title: str, found: dict[str, Any]) -> list[str]:
    lines = [f"{title}: changed or flagged  {found['touched']} of {found['turns']}"]
    for name, count in found["by_rule"].items():
        lines.append(f"  {name}  {count}")
        lines.extend(f"    e.g. {' '.join(e.split())!r}" for e in found["examples"][name])
    return lines


def run_sanitize(args: Any) -> int:
    """`bench --sanitize`: a pure function, measured in this process (no worker, no bus)."""
    locomo = find_locomo(args.locomo)
    if locomo is None:
        print("no LoCoMo file found: give one with --locomo", file=sys.stderr)
        return 2
    results = measure_sanitize(locomo, args.sanitize_kib * 1024)
    print(json.dumps(results) if args.json else sanitize_table(results))
    return 0


def sanitize_table(results: dict[str, Any]) -> str:
    cost = results["per_turn"]
    worst = results["adversarial"]
    lines = [
        f"sanitiser, redact mode; LoCoMo: {results['locomo']}",
        *_found_lines("LoCoMo turns", results["false_positives"]),
        *_found_lines("sentences of dates, times, prices, numbers", results["ordinary_numbers"]),
        f"random 16-digit order numbers taken for cards  {results['order_numbers_as_cards']:.1%}",
        f"sanitize(turn) p50 / p99 / max us  {cost['p50_us']} / {cost['p99_us']} / "
        f"{cost['max_us']}",
        f"worst adversarial {worst['size'] // 1024} KiB input  {worst['worst_s']} s "
        f"({worst['worst_input']})",
    ]
    lines.extend(f"  {name}  {s} s" for name, s in worst["seconds"].items())
    return "\n".join(lines)
