"""The memory browser in a real browser (contract section 20): headless Chromium drives
`memory-worker ui`, started as its own process over a live worker, through signing in,
searching, editing, pinning, forgetting, deleting and erasing, a refused cross-agent URL and a
memory holding markup, with a screenshot of each step under the test's temp dir and an
accessibility pass on every page."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import NoAlertPresentException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.wait import WebDriverWait

from schema.facts import FactAssertRequest, FactQueryRequest
from schema.kg import Entity, KgAddRequest, Relation
from schema.life import ListRequest
from schema.memory import StoreRequest
from tests.browser import accessibility_problems, chromium
from tests.conftest import worker_config
from tests.test_mcp_http import clean_env
from tests.test_readme import README, section
from tests.test_readme_agents import free_port, wait_for_port
from worker.app import App
from worker.client import MemoryClient

CLIENT = worker_config("", Path("unused.db"))
BLOCK = "See and correct memories in a browser"
HOSTILE = '<script>alert("x")</script><img src=x onerror="alert(1)">'


class Visit:
    """One browser session: pages by path, a screenshot per step, the accessibility pass on
    every page it opens."""

    def __init__(self, driver: Any, base: str, shots: Path) -> None:
        self.driver, self.base, self.shots = driver, base, shots
        self.checked: dict[str, list[str]] = {}
        self.step = 0

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)
        self.check()

    def check(self) -> None:
        """The accessibility pass on the page now shown, once per page kind (its path)."""
        path = self.driver.current_url.removeprefix(self.base).split("?")[0]
        if path not in self.checked:
            self.checked[path] = accessibility_problems(self.driver)

    def shot(self, name: str) -> Path:
        self.step += 1
        path = self.shots / f"{self.step:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def h1(self) -> str:
        return str(self.driver.find_element(By.TAG_NAME, "h1").text)

    def fill(self, field: str, text: str) -> None:
        box = self.driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(text)

    def press(self, label: str) -> None:
        """Click the button labelled so, and check the page it leads to."""
        self.go(self.driver.find_element(By.XPATH, f'//button[normalize-space()="{label}"]'))

    def follow(self, text: str, partial: bool = False) -> None:
        how = By.PARTIAL_LINK_TEXT if partial else By.LINK_TEXT
        self.go(self.driver.find_element(how, text))

    def go(self, element: Any) -> None:
        """Click, wait for the next page to replace this one, and check it."""
        page = self.driver.find_element(By.TAG_NAME, "html")
        element.click()
        # Chromium may answer a look at the old page, while the new one replaces it, with an
        # inspector error ("Node with given id does not belong to the document") rather than a
        # stale element: both say the page is going; the next look sees it gone.
        wait = WebDriverWait(self.driver, 20, ignored_exceptions=(WebDriverException,))
        wait.until(staleness_of(page))
        self.check()

    def text(self) -> str:
        return str(self.driver.find_element(By.TAG_NAME, "main").text)


@pytest.fixture
def ui_process(nats_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The README's browser block as written, in tmp_path: the token made, the variable set,
    `memory-worker ui` started (on a free port, on the test's NATS); its URL and the token."""
    block = re.findall(r"^```sh\n(.*?)^```", section(README.read_text(), BLOCK), re.S | re.M)
    lines = [line.split("#")[0].strip() for line in block[0].splitlines()]
    made, exported, serve = lines
    assert made.startswith("memory-worker token ") and serve.startswith("memory-worker ui ")
    token = subprocess.run(
        [sys.executable, "-m", "worker", *shlex.split(made)[1:]],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=True,
    ).stdout.splitlines()[0]  # fmt: skip
    name, value = exported.removeprefix("export ").split("=", 1)
    port = free_port()
    argv = shlex.split(serve)[1:]
    argv[argv.index("--port") + 1] = str(port)
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", *argv, "--nats-url", nats_url],
        cwd=tmp_path,
        env=clean_env(**{name: value.replace("$PWD", str(tmp_path))}),
    )
    try:
        yield f"http://127.0.0.1:{port}", token
    finally:
        process.terminate()
        assert process.wait(timeout=10) in (0, -15)


async def test_a_person_signs_in_searches_edits_pins_forgets_deletes_and_erases_in_chromium(
    nats_url: str, worker: App, ui_process: tuple[str, str], tmp_path: Path
) -> None:
    base, token = ui_process
    await wait_for_port(int(base.rsplit(":", 1)[1]))
    async with await MemoryClient.connect(nats_url, config=CLIENT) as memory:
        for content in ("alice likes green tea", "alice flies to Lisbon on Monday", HOSTILE):
            await memory.store(StoreRequest(agent_id="alice-1", content=content, session_id="s1"))
        await memory.store(StoreRequest(agent_id="alice-2", content="alice-2 keeps the budget"))
        await memory.store(StoreRequest(agent_id="bob-1", content="bob's secret plan"))
        relation = Relation(target="Lisbon", type="travels_to")
        entity = Entity(id="alice", type="person", relations=[relation])
        await memory.kg_add(KgAddRequest(agent_id="alice-1", entity=entity))
        shots = tmp_path / "screenshots"
        shots.mkdir()
        visit = await asyncio.to_thread(drive, base, token, shots)
        listed = await memory.list_memories(ListRequest(agent_id="alice-1"))
        contents = sorted(m.content for m in listed.memories)
        assert contents == ["alice drinks rooibos now", "alice flies to Lisbon on Monday"]
        pinned = [m for m in listed.memories if m.content == "alice drinks rooibos now"]
        assert pinned[0].pinned and pinned[0].summary == "tea preference"
        erased = await memory.list_memories(ListRequest(agent_id="alice-2"))
        assert erased.memories == []
        bobs = await memory.list_memories(ListRequest(agent_id="bob-1"))
        assert [m.content for m in bobs.memories] == ["bob's secret plan"]
    assert len(list(shots.glob("*.png"))) >= 10
    problems = {path: found for path, found in visit.checked.items() if found}
    assert not problems, problems
    for page in ("/login", "/", "/agent", "/memory", "/memory/delete", "/sessions", "/session",
                 "/topics", "/topic", "/graph", "/audit", "/stats", "/settings"):  # fmt: skip
        assert page in visit.checked, page


def drive(base: str, token: str, shots: Path) -> Visit:
    """Everything a person does, in order; returns the visit with its accessibility findings."""
    driver = chromium()
    try:
        visit = Visit(driver, base, shots)
        visit.open("/agent?agent=alice-1")  # no session: the sign-in form
        assert visit.h1() == "Sign in"
        visit.fill("token", "wrong-token")
        visit.press("Sign in")
        assert "not one this browser accepts" in visit.text()
        visit.fill("token", token)
        visit.press("Sign in")
        assert visit.h1() == "Agent alice-1", visit.h1()
        visit.shot("signed-in")
        # The memory holding markup is text: no alert opened, the tags shown as typed.
        assert HOSTILE in visit.text()
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018
        visit.open("/")
        assert "alice-1" in visit.text() and "bob-1" not in visit.text()
        visit.shot("agents")
        visit.follow("alice-1")
        visit.fill("q", "tea")
        visit.press("Show")
        assert visit.text().index("alice likes green tea") < visit.text().index("Lisbon")
        visit.shot("search")
        visit.follow("user memory of", partial=True)
        assert "alice likes green tea" in visit.text()
        visit.fill("content", "alice drinks rooibos now")
        visit.fill("summary", "tea preference")
        visit.press("Save")
        assert "Saved." in visit.text() and "alice drinks rooibos now" in visit.text()
        visit.shot("edited")
        visit.press("Pin")
        assert "Pinned." in visit.text()
        visit.shot("pinned")
        visit.press("Forget")
        assert "Forgotten" in visit.text()
        visit.press("Unforget")
        assert "Restored." in visit.text()
        visit.shot("restored")
        visit.open("/agent?agent=alice-1&q=alert")
        visit.follow("user memory of", partial=True)
        visit.follow("Delete this memory for good")
        assert visit.h1() == "Delete a memory of alice-1?"
        visit.shot("confirm-delete")
        visit.press("Delete for good")
        assert "Deleted for good." in visit.text() and "onerror" not in visit.text()
        visit.follow("Sessions")
        visit.follow("s1")
        assert "alice flies to Lisbon" in visit.text()
        visit.shot("transcript")
        visit.follow("Its topics")
        assert visit.h1() == "Topics of session s1 of alice-1"
        visit.go(driver.find_element(By.XPATH, "//section//h2/a"))
        assert visit.h1().startswith("Topic:") and "alice flies to Lisbon" in visit.text()
        assert "What an agent reads to pick it up" in visit.text()
        visit.shot("topic")
        visit.follow("Knowledge graph")
        visit.fill("entity", "alice")
        visit.press("Show")
        assert driver.find_elements(By.CSS_SELECTOR, "svg circle")
        visit.shot("graph")
        visit.follow("Audit log")
        assert "memory::delete" in visit.text()
        visit.follow("Stats")
        assert driver.find_elements(By.CSS_SELECTOR, "svg rect")
        visit.shot("stats")
        visit.open("/settings?agent=alice-2")
        visit.fill("confirm", "alice-3")
        visit.press("Erase this agent")
        assert "nothing was erased" in visit.text()
        visit.fill("confirm", "alice-2")
        visit.press("Erase this agent")
        assert visit.h1() == "Erased alice-2"
        visit.shot("erased")
        visit.open("/agent?agent=bob-1")  # another token's agent
        assert visit.h1() == "Not allowed" and "secret plan" not in visit.text()
        visit.shot("refused")
        return visit
    finally:
        driver.quit()


async def test_a_person_reads_facts_now_and_then_and_retracts_one_in_chromium(
    nats_url: str, worker: App, ui_process: tuple[str, str], tmp_path: Path
) -> None:
    """From the agent's menu to its facts: Berlin now, Paris on a day of 2025, the history in
    order; retracting Berlin after its confirmation page brings Paris back. Both pages pass the
    accessibility pass."""
    base, token = ui_process
    await wait_for_port(int(base.rsplit(":", 1)[1]))
    async with await MemoryClient.connect(nats_url, config=CLIENT) as memory:
        said = await memory.store(StoreRequest(agent_id="alice-1", content="Maria's flat: Berlin"))
        assert said.id is not None
        # Paris from 2025-01-10, Berlin from 2026-03-01 (said in a memory).
        for obj, since, sources in (
            ("Paris", 1736467200000, []),
            ("Berlin", 1772323200000, [said.id]),
        ):
            await memory.fact_assert(
                FactAssertRequest(
                    agent_id="alice-1", subject="Maria", predicate="lives_in", object=obj,
                    valid_from=since, sources=sources,
                )
            )  # fmt: skip
        shots = tmp_path / "screenshots"
        shots.mkdir()
        visit = await asyncio.to_thread(drive_facts, base, token, shots)
        now = await memory.fact_query(FactQueryRequest(agent_id="alice-1", predicate="lives_in"))
        assert [f.object for f in now.facts] == ["Paris"]
    problems = {path: found for path, found in visit.checked.items() if found}
    assert not problems, problems
    assert {"/facts", "/facts/retract"} <= set(visit.checked)


def drive_facts(base: str, token: str, shots: Path) -> Visit:
    driver = chromium()
    try:
        visit = Visit(driver, base, shots)
        visit.open("/agent?agent=alice-1")
        visit.fill("token", token)
        visit.press("Sign in")
        visit.follow("Facts")
        assert visit.h1() == "Facts of alice-1"
        now = visit.text().split("History")[0]
        assert "Berlin" in now and "Paris" not in now
        history = visit.text().split("History")[1]
        assert history.index("Paris") < history.index("Berlin") and "past" in history
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.timeline rect")) == 2
        visit.shot("facts")
        visit.fill("asof", "2025-06-01")
        visit.press("Show")
        then = visit.text().split("History")[0]
        assert "Paris" in then and "Berlin" not in then
        visit.shot("facts-as-of")
        visit.open("/facts?agent=alice-1")
        visit.go(
            driver.find_element(By.XPATH, '//tr[td[.="Berlin"]]//a[starts-with(., "Retract")]')
        )
        assert visit.h1() == "Retract a fact of alice-1?"
        assert "Maria lives in Berlin" in visit.text()
        visit.shot("confirm-retract")
        visit.press("Retract for good")
        assert "Retracted" in visit.text()
        now = visit.text().split("History")[0]
        assert "Paris" in now and "Berlin" not in now
        visit.shot("retracted")
        return visit
    finally:
        driver.quit()
