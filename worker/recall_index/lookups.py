"""An agent index's string columns: memory ids by slot (and slot by id), session codes, and the
metadata filter's (key, value) lookup, each a base of arrays (`Strings`, memory-mappable) and a
small tail in RAM of what was added since the base was made."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from worker.recall_index.postings import SlotLists, Slots
from worker.recall_index.strings import Strings


class Ids(Sequence[str]):
    """Slot -> memory id (dead slots keep theirs), and the slots an id has held."""

    def __init__(self, base: Strings | None = None) -> None:
        self.base = base or Strings.empty()
        self.tail: list[str] = []
        self._tail_slot: dict[str, int] = {}

    def append(self, memory_id: str) -> int:
        at = len(self.base) + len(self.tail)
        self._tail_slot[memory_id] = at
        self.tail.append(memory_id)  # after the lookup: `len` counts it once it is findable
        return at

    def slots(self, memory_id: str) -> list[int]:
        """The slots holding this id, newest first."""
        found = self.base.positions(memory_id)
        found.sort(reverse=True)
        newest = self._tail_slot.get(memory_id)
        return found if newest is None else [newest, *found]

    def never_held(self, memory_ids: list[str]) -> set[str]:
        """Those of the ids that no slot has held: new memories, appended without a lookup."""
        held = self.base.holding(memory_ids)
        return {
            memory_id
            for memory_id, found in zip(memory_ids, held, strict=True)
            if not found and memory_id not in self._tail_slot
        }

    def __len__(self) -> int:
        return len(self.base) + len(self.tail)

    def __getitem__(self, at: int | slice) -> str:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]  # type: ignore[return-value]
        if at < 0:
            at += len(self)
        base = len(self.base)
        return self.base[at] if at < base else self.tail[at - base]

    def __iter__(self) -> Iterator[str]:
        yield from self.base
        yield from list(self.tail)

    def nbytes(self) -> int:
        return 150 * len(self.tail)


class SessionCodes(Mapping[str, int]):
    """Session id -> the small integer the session column holds: its position."""

    def __init__(self, base: Strings | None = None) -> None:
        self.base = base or Strings.empty()
        self.tail: dict[str, int] = {}

    def code(self, session_id: str) -> int:
        """The session's code, given a new one if it has none."""
        found = self.get(session_id)
        if found is None:
            found = self.tail[session_id] = len(self.base) + len(self.tail)
        return found

    def new_sessions(self) -> list[str]:
        return sorted(self.tail, key=self.tail.__getitem__)

    def get(self, session_id: str, default: int | None = None) -> int | None:  # type: ignore[override]
        found = self.tail.get(session_id)
        if found is not None:
            return found
        position = self.base.find(session_id)
        return default if position < 0 else position

    def __getitem__(self, session_id: str) -> int:
        found = self.get(session_id)
        if found is None:
            raise KeyError(session_id)
        return found

    def __iter__(self) -> Iterator[str]:
        yield from self.base
        yield from list(self.tail)

    def __len__(self) -> int:
        return len(self.base) + len(self.tail)

    def nbytes(self) -> int:
        """The tail's; the base's arrays are counted with the agent's."""
        return 150 * len(self.tail)


def tag_key(key: str, value: str) -> str:
    """One string per (top-level metadata key, canonical JSON value), unambiguous."""
    return f"{len(key)}:{key}{value}"


class MetadataLookup(Mapping[tuple[str, str], Slots]):
    """(key, canonical JSON value) -> slots, over SlotLists keyed by `tag_key`."""

    def __init__(self, lists: SlotLists) -> None:
        self.lists = lists

    def get(self, key: tuple[str, str], default: object = None) -> Slots | None:  # type: ignore[override]
        return self.lists.get(tag_key(*key), default)

    def __getitem__(self, key: tuple[str, str]) -> Slots:
        return self.lists[tag_key(*key)]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for joined in self.lists:
            length, rest = joined.split(":", 1)
            yield rest[: int(length)], rest[int(length) :]

    def __len__(self) -> int:
        return len(self.lists)
