"""The README's shell examples in "Start it" and "Maintenance by hand" run as written against a
live worker, so they never rot."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from worker.app import App

README = Path(__file__).resolve().parent.parent / "README.md"
SECTIONS = ("Start it", "Maintenance by hand")
# Long-running: the worker itself; the test's `worker` fixture stands in for it.
DAEMONS = ("scripts/start", "memory-worker run", ".venv/bin/memory-worker run")


ACTIVATE = ". .venv/bin/activate"


def section(text: str, name: str) -> str:
    found = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert found, f"README has no section {name!r}"
    return found.group(1)


def shell_examples(text: str, name: str) -> list[str]:
    """The commands of the section's ```sh blocks, one per line, comments kept (bash drops
    them)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", section(text, name), re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_sections_have_examples_and_only_the_daemon_is_skipped() -> None:
    """Each named section exists and has shell examples; the only one not run is the start;
    and before the first bare `memory-worker`, "Start it" says how to get it on the PATH."""
    text = README.read_text()
    assert f"`{ACTIVATE}`" in section(text, "Start it")
    for name in SECTIONS:
        assert shell_examples(text, name), name
    skipped = [c for n in SECTIONS for c in shell_examples(text, n) if c.startswith(DAEMONS)]
    assert skipped == ["scripts/start"]


def run_example(command: str, cwd: Path, nats_url: str) -> subprocess.CompletedProcess[str]:
    """As a reader would in the checkout after `. .venv/bin/activate`, but against the test's
    worker: its URL replaces the default and any `--nats-url` the example names."""
    command = re.sub(r"--nats-url \S+", f"--nats-url {nats_url}", command)
    env = {**os.environ, "MEMORY_WORKER_NATS_URL": nats_url}
    return subprocess.run(
        ["bash", "-c", f"{ACTIVATE} && {command}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_every_readme_shell_example_exits_zero(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """Every example of "Start it" and "Maintenance by hand" exits 0; a `fire` prints one JSON
    reply line that is not an error."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").exists() or not (venv / "bin" / "memory-worker").exists():
        pytest.skip("the tests do not run from the project's .venv")
    (tmp_path / ".venv").symlink_to(venv)
    text = README.read_text()
    commands = [c for n in SECTIONS for c in shell_examples(text, n) if not c.startswith(DAEMONS)]
    assert len(commands) >= 6
    for command in commands:
        done = await asyncio.to_thread(run_example, command, tmp_path, nats_url)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if " fire " in f" {command} ":
            [line] = done.stdout.splitlines()
            assert "error" not in json.loads(line), (command, line)
