"""scripts/bootstrap: what scripts/start and scripts/test install into the .venv they share,
checked against a stand-in for the venv's python that records the pip calls instead of making
them (a real install takes a minute)."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def checkout(tmp_path: Path, *, pip_fails: bool = False) -> Path:
    """A copy of the scripts and pyproject.toml whose .venv/bin/python logs its arguments."""
    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap", tmp_path / "scripts" / "bootstrap")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/pip-calls"\nexit {int(pip_fails)}\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def bootstrap(root: Path, *args: str) -> tuple[int, list[str]]:
    """Run it; return its exit code and the package installs it asked pip for."""
    calls = root / "pip-calls"
    calls.unlink(missing_ok=True)
    done = subprocess.run(
        [str(root / "scripts" / "bootstrap"), *args], capture_output=True, text=True, timeout=60
    )
    made = calls.read_text().splitlines() if calls.exists() else []
    installs = [line.rsplit(" ", 1)[-1] for line in made if "-e " in line]
    return done.returncode, [target.replace(str(root), "ROOT") for target in installs]


def test_start_installs_the_runtime_and_test_adds_the_test_tools_each_once(tmp_path: Path) -> None:
    """scripts/start's bootstrap installs the worker without `[test]`; scripts/test's adds the
    test extra; after both neither installs again, and a start never removes the test tools."""
    root = checkout(tmp_path)
    assert bootstrap(root) == (0, ["ROOT"])
    assert bootstrap(root) == (0, [])
    assert bootstrap(root, "--test") == (0, ["ROOT[test]"])
    assert bootstrap(root) == (0, [])
    assert bootstrap(root, "--test") == (0, [])
    fresh = checkout(tmp_path / "test-first")
    assert bootstrap(fresh, "--test") == (0, ["ROOT[test]"])
    assert bootstrap(fresh) == (0, [])


def test_a_changed_pyproject_installs_again_and_a_failed_install_leaves_no_stamp(
    tmp_path: Path,
) -> None:
    """A new pyproject.toml invalidates both stamps; a failed pip run exits non-zero and is
    retried on the next run."""
    root = checkout(tmp_path)
    bootstrap(root, "--test")
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write("# changed\n")
    assert bootstrap(root) == (0, ["ROOT"])
    assert bootstrap(root, "--test") == (0, ["ROOT[test]"])
    assert len(list((root / ".venv").glob(".installed-*"))) == 2
    broken = checkout(tmp_path / "broken", pip_fails=True)
    assert bootstrap(broken)[0] == 1
    assert list((broken / ".venv").glob(".installed-*")) == []
