"""Headless Chromium for the memory browser's tests (Debian's `chromium` and `chromium-driver`,
which scripts/test installs when missing), and the accessibility pass each page gets: one h1,
headings that never skip a level going down, a label for every control, and every control
reached by the Tab key."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

CHROMIUM = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1100,800",
)  # fmt: skip
MISSING = (
    "headless Chromium is not installed: run scripts/test (it installs Debian's chromium and "
    "chromium-driver) or `apt-get install -y chromium chromium-driver`"
)


def chromium(profile: Path | None = None) -> Any:
    """A fresh headless Chromium with its own profile directory."""
    assert CHROMIUM.exists() and DRIVER.exists(), MISSING
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    where = profile or Path(tempfile.mkdtemp(prefix="chromium-"))
    options.add_argument(f"--user-data-dir={where}")
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)


# Run by the driver (DevTools), not by the page: the page's CSP allows no inline script.
AUDIT = """
const out = {problems: []};
const h1 = document.querySelectorAll('h1');
if (h1.length !== 1) out.problems.push('h1 count ' + h1.length);
let last = 0;
for (const h of document.querySelectorAll('h1,h2,h3,h4,h5,h6')) {
  const level = Number(h.tagName[1]);
  if (level > last + 1) out.problems.push('heading ' + h.tagName + ' after h' + last);
  last = level;
}
for (const c of document.querySelectorAll('input,select,textarea')) {
  if (c.type === 'hidden') continue;
  const labelled = (c.id && document.querySelector('label[for="' + CSS.escape(c.id) + '"]'))
    || c.getAttribute('aria-label') || c.closest('label');
  if (!labelled) out.problems.push('no label: ' + (c.name || c.outerHTML));
}
for (const s of document.querySelectorAll('svg')) {
  if (s.getAttribute('role') !== 'img' || !s.querySelector('title'))
    out.problems.push('svg without role=img and a title');
}
if (!document.documentElement.lang) out.problems.push('no lang');
out.controls = Array.from(document.querySelectorAll(
  'a[href],button,input:not([type=hidden]),select,textarea')).length;
return out;
"""


def accessibility_problems(driver: Any) -> list[str]:
    """What the page lacks (empty: nothing), the Tab walk included: pressing Tab from the top
    of the page focuses every link and control, each once, before coming back round."""
    found = driver.execute_script(AUDIT)
    problems: list[str] = list(found["problems"])
    driver.execute_script("document.activeElement && document.activeElement.blur()")
    reached: list[Any] = []
    for _ in range(found["controls"] + 2):
        driver.switch_to.active_element.send_keys(Keys.TAB)
        current = driver.switch_to.active_element
        if current.tag_name == "body":
            continue
        if reached and current == reached[0]:
            break
        reached.append(current)
    controls = driver.find_elements(
        By.CSS_SELECTOR, "a[href],button,input:not([type=hidden]),select,textarea"
    )
    missed = [c.get_attribute("outerHTML")[:80] for c in controls if c not in reached]
    if missed:
        problems.append(f"not reached by Tab: {missed}")
    driver.execute_script("document.activeElement && document.activeElement.blur()")
    return problems
