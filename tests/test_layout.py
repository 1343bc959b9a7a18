"""The README's Layout section names every module and package of the tree, so it cannot fall
behind a move or a new module unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_layout_names_every_module_of_the_tree() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") :]
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", layout))
    missing = []
    for package in ("worker", "handlers", "scheduler", "schema"):
        for path in (ROOT / package).rglob("*.py"):
            name = path.stem
            if name == "__init__":
                continue
            if name not in words:
                missing.append(str(path.relative_to(ROOT)))
        for sub in (ROOT / package).iterdir():
            named = f"{package}/{sub.name}/" in layout or sub.name == "migrations"
            if sub.is_dir() and (sub / "__init__.py").exists() and not named:
                missing.append(f"{package}/{sub.name}/")
    assert not missing, f"README Layout does not name: {missing}"
