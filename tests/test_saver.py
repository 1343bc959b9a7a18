"""The index saver's thread survives what happens to an agent while it works on it."""

from __future__ import annotations

import contextlib
from pathlib import Path

from worker.recall_index.persist import Store
from worker.recall_index.saver import Saver

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
