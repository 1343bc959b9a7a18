"""The README's examples of "Use it from Python" run as written against a live worker."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.test_readme import section
from worker.app import App

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEFAULT_URL = "nats://127.0.0.1:4222"


def blocks(name: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section(README.read_text(), name), re.S | re.M)


def run_python(code: str, nats_url: str) -> subprocess.CompletedProcess[str]:
    """As a reader would run it from the checkout, against the test's worker."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return subprocess.run(
        [sys.executable, "-c", code.replace(DEFAULT_URL, nats_url)],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_the_python_example_stores_recalls_and_prints_a_refusal(
    nats_url: str, worker: App
) -> None:
    """The example finds what it stored and prints the worker's 400 naming `$.limit`."""
    [code] = blocks("Use it from Python", "python")
    assert DEFAULT_URL in code
    done = await asyncio.to_thread(run_python, code, nats_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(" The deploy key rotates on Fridays"), lines
    assert lines[-1].startswith("400 invalid_request ") and "`$.limit`" in lines[-1], lines
