"""The README and docs/ stand on their own: the README is a front door, the reference in docs/
covers every trigger's keys and every setting, and nothing points outside the repository (a
clone has nothing beside it)."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from worker.config import Config, env_name
from worker.registry import ROUTES

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
# Keys every request takes, documented once under "Conventions" rather than per trigger.
COMMON_KEYS = ("tenant", "grants")


def trigger_sections(text: str) -> dict[str, str]:
    """Each `### memory::...` section of docs/triggers.md, up to the next heading of its level or
    above."""
    found = re.finditer(
        r"^### (memory::[a-z:]+)\b[^\n]*\n(.*?)(?=^##? |^### |\Z)", text, re.M | re.S
    )
    return {match.group(1): match.group(2) for match in found}


def keys(kind: type) -> list[str]:
    return [field.encode_name for field in msgspec.inspect.type_info(kind).fields]  # type: ignore[attr-defined]


def test_the_readme_is_a_front_door_of_at_most_400_lines() -> None:
    """At most 400 lines, the two commands (start, tests) in its first 50, and a pointer to
    each page of docs/."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400, len(lines)
    first_screen = "\n".join(lines[:50])
    assert "\nscripts/start\n" in first_screen and "\nscripts/test\n" in first_screen
    for page in sorted(DOCS.glob("*.md")):
        assert f"](docs/{page.name})" in "\n".join(lines), page.name


def test_the_wire_reference_names_every_key_of_every_trigger() -> None:
    """docs/triggers.md has a section per trigger of the registry, naming each request key
    (`tenant` and `grants` once, under Conventions) and each top-level reply key, as code or as
    a key of its JSON examples."""
    text = (DOCS / "triggers.md").read_text(encoding="utf-8")
    conventions = text[text.index("## Conventions") : text.index("### memory::")]
    assert all(f"`{key}`" in conventions for key in COMMON_KEYS)
    sections = trigger_sections(text)
    missing = []
    for route in ROUTES:
        section = sections.get(route.trigger)
        if section is None:
            missing.append(f"{route.trigger}: no section")
            continue
        wanted = [k for k in keys(route.request_type) if k not in COMMON_KEYS]
        wanted += keys(route.reply_type)
        named = set(re.findall(r"`([A-Za-z]+)`", section)) | set(
            re.findall(r'"([A-Za-z]+)"', section)
        )
        missing += [f"{route.trigger}: `{key}`" for key in wanted if key not in named]
    assert not missing, missing
    assert set(sections) == {route.trigger for route in ROUTES}, "a section for no trigger"


def test_the_configuration_page_names_every_setting() -> None:
    """Every MEMORY_WORKER_* variable the worker reads, spelt out in docs/configuration.md."""
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    names = [env_name(field.name) for field in msgspec.structs.fields(Config)]
    names.append("MEMORY_WORKER_MCP_TOKENS")  # read by `mcp` only, not part of Config
    assert [name for name in names if f"`{name}`" not in text] == []


def test_nothing_points_outside_the_repository() -> None:
    """No page names a path above the checkout or the project's former private files, and each
    relative link leads to a file of the repository."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for outside in ("../", "shared/SCALE.md", "SCALE.md", "CONTRACT.md", "shared/bench"):
            assert outside not in text, (page.name, outside)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if not re.match(r"[a-z]+://", target):
                assert (page.parent / target).exists(), (page.name, target)
