"""The index saver's thread survives what happens to an agent while it works on it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from worker.recall_index import saver as saver_module
from worker.recall_index.persist import Store
from worker.recall_index.saver import ADOPT_AFTER, ADOPT_MOST, Saver

KEY = ("", "erased-meanwhile")


def test_an_agent_erased_while_its_snapshot_is_rewritten_leaves_the_saver_working(
    tmp_path: Path,
) -> None:
    """A rewrite (after a removal) of an agent that is erased while the rewrite runs ends
    quietly with nothing left to rewrite, instead of a KeyError that killed the saver's thread
    and so every later snapshot."""
    saver: Saver

    def freeze(key: tuple[str, str]) -> None:
        saver.drop(key)  # memory::erase lands while the saver takes the agent's state

    saver = Saver(
        Store(tmp_path / "memory.db.index"),
        freeze=freeze,
        cold=lambda key: None,
        hold=lambda key, frozen: contextlib.nullcontext(),
    )
    saver.removed(KEY)
    saver.rewrite(KEY)
    saver.removed(KEY)  # the next removal of another memory is rewritten in its turn
    assert saver._removals_due(every=True) == [KEY]


def test_an_agent_written_in_a_burst_is_adopted_once_its_writes_pause_or_past_adopt_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adopting an agent that is not loaded waits while its stores keep coming (kept in step
    during a burst, it cost the burst about 45% of its stores per second), follows at once past
    ADOPT_MOST changes, and happens at a clean stop whatever the pause."""
    saver = Saver(
        Store(tmp_path / "memory.db.index"),
        freeze=lambda key: None,
        cold=lambda key: None,
        hold=lambda key, frozen: contextlib.nullcontext(),
    )
    burst, large = ("", "burst"), ("", "large")
    saver.adopt(burst, ADOPT_AFTER)
    saver.adopt(large, ADOPT_MOST)
    assert saver._adopt_due() == [large]
    assert saver._adopt_due(every=True) == [burst, large]
    monkeypatch.setattr(saver_module, "ADOPT_QUIET_S", 0.0)
    assert saver._adopt_due() == [burst, large]
