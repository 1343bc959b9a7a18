"""docs/layout.md names every module and package of the tree, each in the entry of the package
that holds it, so it cannot fall behind a move or a new module unnoticed; the README's Layout
names every top-level folder and points there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("worker", "handlers", "scheduler", "schema")


def layout_entries(page: str, heading: str = "## Modules by package") -> dict[str, str]:
    """The layout block's entries by folder: a line that starts with `folder/` opens one, and
    the indented lines after it belong to it (`worker/recall_index/  per-agent ...`)."""
    section = page[page.index(heading) :]
    block = re.search(r"^```\n(.*?)^```", section, re.S | re.M)
    assert block, "the Layout section has no code block"
    entries: dict[str, str] = {}
    folder = None
    for line in block.group(1).splitlines():
        opened = re.match(r"([a-z_]+(?:/[a-z_]+)*/)\s", line + " ")
        if opened and not line.startswith(" "):
            folder = opened.group(1)
            entries[folder] = line[len(folder) :]
        elif folder is not None:
            entries[folder] += "\n" + line
    return entries


def tree() -> list[str]:
    """The source files of the four packages, relative to the repository."""
    return [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


def unnamed(entries: dict[str, str], files: list[str]) -> list[str]:
    """The modules and packages among files that their package's entry does not name: a module
    by its name as a word (or its path) in the entry of the folder that holds it, a package
    (a folder with `__init__.py` below the top) by an entry of its own or its path in its
    parent's entry."""
    missing = []
    for file in files:
        folder, _, name = file.rpartition("/")
        stem = name.removesuffix(".py")
        text = entries.get(f"{folder}/", "")
        if stem == "__init__":
            parent = folder.rpartition("/")[0]
            named = f"{folder}/" in entries or f"{folder}/" in entries.get(f"{parent}/", "")
            if "/" in folder and not named:
                missing.append(f"{folder}/")
        elif file not in text and not re.search(rf"\b{re.escape(stem)}\b", text):
            missing.append(file)
    return missing


def test_docs_layout_names_every_module_in_its_packages_entry() -> None:
    """Each module is named in the entry of its own package (a name elsewhere in the layout
    does not count), and each package has an entry or is named by its path."""
    entries = layout_entries((ROOT / "docs" / "layout.md").read_text(encoding="utf-8"))
    assert set(PACKAGES) <= {folder.split("/")[0] for folder in entries}
    missing = unnamed(entries, tree())
    assert not missing, f"docs/layout.md does not name, in its package's entry: {missing}"


def test_the_readme_layout_names_every_top_level_folder_and_points_to_the_modules() -> None:
    """The README's Layout has an entry for each top-level folder of the checkout that holds
    code, tests, deployment or docs, and names docs/layout.md for the modules."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    entries = layout_entries(readme, "## Layout")
    folders = {*PACKAGES, "tests", "deploy", "docs"}
    assert {folder.rstrip("/") for folder in entries} >= folders
    assert all((ROOT / folder).is_dir() for folder in folders)
    assert "docs/layout.md" in readme[readme.index("## Layout") :]


def test_a_module_named_only_in_another_packages_entry_is_missing() -> None:
    """A module whose name is a word of another package's entry only is reported (the word
    anywhere in the Layout passed before), and so is a package without an entry."""
    files = [
        "worker/app.py",
        "worker/state.py",
        "worker/bench/__init__.py",
        "worker/bench/state.py",
    ]
    entries = {"worker/": "app (start and stop)", "worker/bench/": "the bench: kv (state)"}
    assert unnamed(entries, files) == ["worker/state.py"]
    assert unnamed({**entries, "worker/": "app, state"}, files) == []
    assert unnamed({"worker/": "app, state"}, files) == ["worker/bench/", "worker/bench/state.py"]
