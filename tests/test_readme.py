"""Every shell example of the README and docs/ runs as written, so none rots: against a live
worker here, or in the test named for it below; the few that cannot run in a test say why."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from worker.__main__ import _parser
from worker.app import App

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
ACTIVATE = ". .venv/bin/activate"

# Examples not run against the test's worker: a command as written (exact), or a prefix ending
# in a space, and the test that runs it instead or why nothing can.
ELSEWHERE = {
    "scripts/start": "the daemon: tests/test_start.py runs scripts/start itself",
    "scripts/test": "the whole suite: CI runs exactly this",
    ".venv/bin/python example.py": "tests/test_readme_agents.py runs the README's Python block so",
    "memory-worker token --name alice --agents 'alice-*' --file ui-tokens.json": (
        "tests/test_ui_browser.py runs the README's browser block as written"
    ),
    "export MEMORY_WORKER_UI_TOKENS=$PWD/ui-tokens.json": "tests/test_ui_browser.py, the same",
    "memory-worker ui ": "tests/test_ui_browser.py, the same block (on a free port)",
    "memory-worker token ": "tests/test_readme_agents.py runs the README's HTTP block as written",
    "export MEMORY_WORKER_MCP_TOKENS=$PWD/mcp-tokens.json": "tests/test_readme_agents.py, the same",
    "memory-worker mcp --http ": "tests/test_readme_agents.py, the same block",
    "docker compose ": "needs a container runtime; tests/test_deploy.py checks the compose file",
    "memory-worker cluster ": "needs a sharded cluster; tests/test_shards.py runs `cluster`",
    "nats pub ": "the nats CLI is not part of the project; tests/test_ingest.py publishes so",
    ".venv/bin/memory-worker bench ": "minutes long: its arguments are checked below by the "
    "CLI's own parser, and tests/test_bench.py runs the bench on small sizes",
}
# Long-running commands whose examples name only their arguments.
PARSED_ONLY = (".venv/bin/memory-worker bench ",)


@dataclass(frozen=True)
class Example:
    page: str
    section: str
    command: str


def sections(text: str) -> list[tuple[str, str]]:
    """The page's `##` sections (the part before the first as ""), with their text."""
    parts = re.split(r"^## (.+)\n", text, flags=re.M)
    return [("", parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]


def section(text: str, name: str) -> str:
    found = dict(sections(text))
    assert name in found, f"no section {name!r}"
    return found[name]


def shell_examples() -> list[Example]:
    """Every line of every ```sh block of the README and docs/ (comments kept: bash drops
    them)."""
    examples = []
    for page in PAGES:
        for name, text in sections(page.read_text(encoding="utf-8")):
            for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
                for line in block.splitlines():
                    if line.strip():
                        where = str(page.relative_to(ROOT))
                        examples.append(Example(where, name, line))
    return examples


def elsewhere(command: str) -> str | None:
    for key, why in ELSEWHERE.items():
        if command == key or (key.endswith(" ") and command.startswith(key)):
            return why
    return None


def test_every_example_runs_here_or_names_where_it_does() -> None:
    """Each exception is used by some example (none left over), the README says how to get
    `memory-worker` on the PATH before its first bare use, and each bench example's arguments
    are ones the CLI takes."""
    examples = shell_examples()
    used = {key for key in ELSEWHERE for e in examples if elsewhere(e.command) == ELSEWHERE[key]}
    assert used == set(ELSEWHERE), set(ELSEWHERE) - used
    readme = README.read_text(encoding="utf-8")
    assert f"`{ACTIVATE}`" in readme.split("\nmemory-worker ", 1)[0]
    for example in examples:
        if example.command.startswith(PARSED_ONLY):
            argv = shlex.split(example.command.split("#")[0])[1:]
            _parser().parse_args(argv)  # exits 64 on an argument the CLI does not take


def locomo_stub(directory: Path) -> None:
    """A `locomo10.json` of three samples, two of the dev split, for the example that picks it."""
    names = ("conv-26", "conv-1", "conv-42")
    samples = [{"sample_id": name, "qa": [], "conversation": {}} for name in names]
    (directory / "locomo10.json").write_text(json.dumps(samples), encoding="utf-8")


def run_example(command: str, cwd: Path, nats_url: str) -> subprocess.CompletedProcess[str]:
    """As a reader would in the checkout after `. .venv/bin/activate`, but against the test's
    worker: its URL replaces the default and any `--nats-url` the example names. `scripts/...`
    runs in the checkout itself; anything else in an empty directory with the checkout's .venv."""
    command = re.sub(r"--nats-url \S+", f"--nats-url {nats_url}", command)
    env = {**os.environ, "MEMORY_WORKER_NATS_URL": nats_url}
    return subprocess.run(
        ["bash", "-c", f"{ACTIVATE} && {command}"],
        cwd=ROOT if command.startswith("scripts/") else cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
async def test_every_other_shell_example_exits_zero(
    nats_url: str, worker: App, tmp_path: Path
) -> None:
    """Every example not named above exits 0 against a live worker; a `fire` prints one JSON
    reply line that is not an error; the LoCoMo split keeps the dev conversations only."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").exists() or not (venv / "bin" / "memory-worker").exists():
        pytest.skip("the tests do not run from the project's .venv")
    (tmp_path / ".venv").symlink_to(venv)
    locomo_stub(tmp_path)
    commands = [e.command for e in shell_examples() if elsewhere(e.command) is None]
    assert len(commands) >= 10
    for command in commands:
        done = await asyncio.to_thread(run_example, command, tmp_path, nats_url)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if " fire " in f" {command} ":
            [line] = done.stdout.splitlines()
            assert "error" not in json.loads(line), (command, line)
    split = json.loads((tmp_path / "locomo-dev.json").read_text(encoding="utf-8"))
    assert [sample["sample_id"] for sample in split] == ["conv-26", "conv-42"]
