"""Lists of slots by string key, for one agent's index: keyword postings (token -> rows whose
content has it), the metadata and tag filters' lookups (-> rows that have it).

Each is a base that does not change (CSR arrays: the keys as `Strings`, where each key's slots
start, the slots; built by a load from SQLite or opened memory-mapped from a snapshot) and a tail
of what was added since, grown in RAM. Slots are int32: an agent holds fewer than 2**31 rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from handlers.recall.slots import Dense
from handlers.text import stem
from worker.recall_index.mapping import mapped
from worker.recall_index.strings import Strings

Slots = npt.NDArray[np.int32]
EMPTY: Slots = np.zeros(0, dtype=np.int32)
# A token in at least 1/DENSE_SHARE of the slots its posting spans, and in DENSE_FROM of them,
# gets bits for a recall's membership tests (Postings.dense): no larger than its posting.
DENSE_SHARE = 32
DENSE_FROM = 4096


class GrowingLists:
    """Each key's slots in a numpy array grown by doubling, so that appending is cheap and a
    reader's view of the first `count` entries stays valid (growth copies, never overwrites)."""

    def __init__(self) -> None:
        self._arrays: dict[str, Slots] = {}
        self._counts: dict[str, int] = {}
        self._bytes = 0  # the arrays' bytes, and 160 a key (the index's budget counts them)

    def add(self, key: str, slot: int) -> bool:
        """Append; True when the key is new here."""
        found = self._arrays.get(key)
        count = self._counts.get(key, 0)
        if found is None:
            found = np.empty(4, dtype=np.int32)
            self._bytes += found.nbytes + 160
        elif count == len(found):
            grown = np.empty(2 * count, dtype=np.int32)
            grown[:count] = found
            self._bytes += grown.nbytes - found.nbytes
            found = grown
        found[count] = slot
        # The count before the array: a reader (without the lock) never finds an array whose
        # count is missing, and a count ahead of its array only slices what is there.
        self._counts[key] = count + 1
        self._arrays[key] = found
        return count == 0

    def add_all(self, keys: Iterable[str], slot: int) -> list[str]:
        """`add` the slot to each key (a memory's words: one call, not one per word); the keys
        new here."""
        arrays, counts, new = self._arrays, self._counts, []
        for key in keys:
            found = arrays.get(key)
            if found is None:
                found = arrays[key] = np.empty(4, dtype=np.int32)  # unseen until counted
                self._bytes += found.nbytes + 160
                new.append(key)
                count = 0
            else:
                count = counts[key]
                if count == len(found):
                    grown = np.empty(2 * count, dtype=np.int32)
                    grown[:count] = found
                    self._bytes += grown.nbytes - found.nbytes
                    found = arrays[key] = grown  # a reader's count only slices what is there
            found[count] = slot
            counts[key] = count + 1
        return new

    def get(self, key: str) -> Slots | None:
        found = self._arrays.get(key)
        if found is None:
            return None
        return found[: self._counts.get(key, 0)]

    def frozen(self) -> dict[str, Slots]:
        """A copy of every list (under the index lock: the writer may be appending)."""
        return {
            key: found[: self._counts.get(key, 0)].copy() for key, found in self._arrays.items()
        }

    def nbytes(self) -> int:
        return self._bytes


class Csr:
    """The base: key i's slots are values[starts[i]:starts[i + 1]]."""

    __slots__ = ("keys", "starts", "values")

    def __init__(self, keys: Strings, starts: npt.NDArray[np.int64], values: Slots) -> None:
        self.keys, self.starts, self.values = keys, starts, values

    @classmethod
    def empty(cls) -> Csr:
        return cls(Strings.empty(), np.zeros(1, np.int64), EMPTY)

    @classmethod
    def gathered(cls, lists: Mapping[str, Iterable[int]]) -> Csr:
        """From key -> slots gathered in RAM (a load from SQLite)."""
        return cls.empty().merged(
            {key: np.fromiter(slots, np.int32) for key, slots in lists.items()}
        )

    def at(self, position: int) -> Slots:
        return self.values[int(self.starts[position]) : int(self.starts[position + 1])]

    def get(self, key: str) -> Slots | None:
        position = self.keys.find(key)
        return None if position < 0 else self.at(position)

    def check(self, bound: int) -> None:
        """Raise ValueError unless the arrays fit together and every slot is below `bound`."""
        self.keys.check()
        if len(self.starts) != len(self.keys) + 1 or int(self.starts[-1]) != len(self.values):
            raise ValueError("lists: starts do not fit the values")
        if int(self.starts[0]) != 0 or bool(np.any(np.diff(self.starts) < 0)):
            raise ValueError("lists: starts out of order")
        if self.values.dtype != np.int32:
            raise ValueError("lists: slots of the wrong type")
        # One pass: a negative slot read as unsigned is past any bound.
        if len(self.values) and int(self.values.view(np.uint32).max()) >= bound:
            raise ValueError("lists: a slot out of range")

    def merged(self, tail: Mapping[str, Slots]) -> Csr:
        """These lists with the tail's slots appended to each key (new keys last). Copies the
        base in a few large pieces: one per key the tail touched."""
        if not tail:
            return self
        count = len(self.keys)
        known = sorted((p, key) for key in tail if (p := self.keys.find(key)) >= 0)
        new = [key for key in tail if self.keys.find(key) < 0]
        sizes = np.zeros(count + len(new), dtype=np.int64)
        sizes[:count] = np.diff(self.starts)
        for position, key in known:
            sizes[position] += len(tail[key])
        for offset, key in enumerate(new):
            sizes[count + offset] = len(tail[key])
        starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        values = np.empty(int(starts[-1]), dtype=np.int32)
        source = done = 0
        for position, key in known:
            end = int(self.starts[position + 1])
            values[done : done + end - source] = self.values[source:end]
            done += end - source
            source = end
            values[done : done + len(tail[key])] = tail[key]
            done += len(tail[key])
        values[done : done + len(self.values) - source] = self.values[source:]
        done += len(self.values) - source
        for key in new:
            values[done : done + len(tail[key])] = tail[key]
            done += len(tail[key])
        return Csr(self.keys.extended(new), starts, values)

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        found = {f"{name}.keys.{part}": array for part, array in self.keys.arrays().items()}
        found[f"{name}.starts"] = self.starts
        found[f"{name}.values"] = self.values
        return found

    @classmethod
    def of(cls, arrays: Mapping[str, np.ndarray], name: str) -> Csr:
        keys = Strings(
            *(arrays[f"{name}.keys.{p}"] for p in ("blob", "offsets", "hashes", "order"))
        )
        return cls(keys, arrays[f"{name}.starts"], arrays[f"{name}.values"])

    def nbytes(self) -> int:
        arrays = (*self.keys.arrays().values(), self.starts, self.values)
        return sum(int(array.nbytes) for array in arrays if not mapped(array))


# Base lookups kept per list (`remembered`), and what each is counted as (key, view, entry).
KNOWN_KEYS = 4096
KNOWN_BYTES = 300
K = TypeVar("K")
V = TypeVar("V")


def remembered(known: dict[K, V], key: K, look_up: Callable[[K], V]) -> V:
    """look_up(key), kept in `known` (emptied past KNOWN_KEYS), for a lookup that never changes
    its answer. Readers may fill it at once: the worst is a lookup done twice."""
    try:
        return known[key]
    except KeyError:
        pass
    found = look_up(key)
    if len(known) >= KNOWN_KEYS:
        known.clear()
    known[key] = found
    return found


class SlotLists(Mapping[str, Slots]):
    """Key -> slots: the base's then the tail's (a key's slots ascend: the tail's are newer).

    The base's answers are kept (`remembered`): the base never changes, and a lookup in it hashes
    the key in Python, which was most of a recall's keyword weights at 20 000 memories."""

    def __init__(self, base: Csr | None = None) -> None:
        self.base = base or Csr.empty()
        self.tail = GrowingLists()
        self._known: dict[str, Slots | None] = {}
        # key -> its base and tail slots end to end, with room, and how many of the tail's it
        # holds: a recall appends the tail's slots added since instead of copying the base's
        # again (a common word's million slots: 1 ms a recall while the agent grows).
        self._joined: dict[str, tuple[Slots, int]] = {}
        self.joined_bytes = 0

    def add(self, key: str, slot: int) -> bool:
        return self.tail.add(key, slot)

    def get(self, key: str, default: object = None) -> Slots | None:  # type: ignore[override]
        old, new = remembered(self._known, key, self.base.get), self.tail.get(key)
        if old is None or new is None:
            found = new if old is None else old
            return default if found is None else found  # type: ignore[return-value]
        return self._join(key, old, new)

    def _join(self, key: str, old: Slots, new: Slots) -> Slots:
        """old then new, from the key's joined array. Readers may join at once: a position is
        only ever written with the same slot (base and tail never change what they hold), past
        the end of every view handed out before."""
        size = len(old) + len(new)
        found = self._joined.get(key)
        if found is None or len(found[0]) < size:
            if len(self._joined) >= KNOWN_KEYS:
                self._joined.clear()
                self.joined_bytes = 0
            joined = np.empty(len(old) + 2 * len(new) + 16, dtype=np.int32)
            joined[: len(old)] = old
            joined[len(old) : size] = new
            self.joined_bytes += joined.nbytes - (0 if found is None else found[0].nbytes)
        else:
            joined, held = found
            if held < len(new):
                joined[len(old) + held : size] = new[held:]
        self._joined[key] = (joined, len(new))
        return joined[:size]

    def __getitem__(self, key: str) -> Slots:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        seen = set(self.base.keys)
        yield from seen
        yield from (key for key in self.tail.frozen() if key not in seen)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def merged(self, tail: Mapping[str, Slots]) -> Csr:
        return self.base.merged(tail)

    def nbytes(self) -> int:
        known = KNOWN_BYTES * (len(self._known) + len(self._joined))
        return self.base.nbytes() + self.tail.nbytes() + known + self.joined_bytes


class Postings(SlotLists):
    """Token -> rows, and stem -> the tokens seen with it (the `stems` keyword mode)."""

    def __init__(self, base: Csr | None = None, stems: Csr | None = None) -> None:
        super().__init__(base)
        self.stems = stems or Csr.empty()  # stem -> positions of its tokens in base.keys
        self.new_variants: dict[str, list[str]] = {}  # stem -> tokens new since the base
        self._new_tokens = 0  # how many new_variants holds
        self._known_variants: dict[str, tuple[str, ...]] = {}  # the base's, kept
        self._dense: dict[str, Dense | None] = {}
        self._dense_bytes = 0  # their bits' (counted as made: summing them took every recall)

    def dense(self, token: str) -> Dense | None:
        """The token's base slots as bits, when it is in at least 1/DENSE_SHARE of the slots
        they span (so the bits take no more bytes than the slots), made at the first recall
        that asks and kept: the base never changes. Slots added since are past `upto`."""
        if token in self._dense:
            return self._dense[token]
        found = self.base.get(token)
        made = None
        if found is not None and len(found) >= DENSE_FROM:
            upto = int(found[-1]) + 1
            if len(found) * DENSE_SHARE >= upto:
                inside = np.zeros(upto, dtype=np.bool_)
                inside[found] = True
                made = Dense(np.packbits(inside, bitorder="little"), upto)
        if made is not None and token not in self._dense:
            self._dense_bytes += made.bits.nbytes
        self._dense[token] = made  # two readers making the same bits at once is harmless
        return made

    def kept(self) -> int:
        """What it keeps for recalls (bits, base lookups, joined lists: how many, and the
        joined lists' bytes): a recall may add some."""
        lookups = len(self._dense) + len(self._known) + len(self._known_variants)
        return lookups + len(self._joined) + self.joined_bytes

    def nbytes(self) -> int:
        variants = 100 * self._new_tokens + KNOWN_BYTES * len(self._known_variants)
        return super().nbytes() + self.stems.nbytes() + self._dense_bytes + variants

    @classmethod
    def gathered(cls, lists: Mapping[str, Iterable[int]]) -> Postings:
        base = Csr.gathered(lists)
        variants: dict[str, list[int]] = {}
        for position, token in enumerate(base.keys):
            variants.setdefault(stem(token), []).append(position)
        return cls(base, Csr.gathered(variants))

    def add(self, key: str, slot: int) -> bool:
        if super().add(key, slot) and self.base.keys.find(key) < 0:
            self.new_variants.setdefault(stem(key), []).append(key)
            self._new_tokens += 1
            return True
        return False

    def add_all(self, keys: Iterable[str], slot: int) -> None:
        """`add` for each of a memory's words."""
        for key in self.tail.add_all(keys, slot):
            if self.base.keys.find(key) < 0:
                self.new_variants.setdefault(stem(key), []).append(key)
                self._new_tokens += 1

    def variants(self, stemmed: str) -> tuple[str, ...]:
        old = remembered(self._known_variants, stemmed, self._base_variants)
        return old + tuple(self.new_variants.get(stemmed, ()))

    def _base_variants(self, stemmed: str) -> tuple[str, ...]:
        found = self.stems.get(stemmed)
        return () if found is None else tuple(self.base.keys[int(p)] for p in found)

    def merged_stems(self, new_tokens: list[str], count: int) -> Csr:
        """The stems' base once `new_tokens` follow the base's `count` tokens."""
        tail: dict[str, list[int]] = {}
        for offset, token in enumerate(new_tokens):
            tail.setdefault(stem(token), []).append(count + offset)
        return self.stems.merged({key: np.asarray(p, np.int32) for key, p in tail.items()})
