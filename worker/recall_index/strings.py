"""Many strings in two arrays (UTF-8 bytes, offsets) with a lookup that needs no Python object
per string: 64-bit hashes sorted once, searched with numpy and confirmed by comparing bytes.

A dict of a million ids costs about 200 bytes per id and a second to build; these arrays cost
the ids' bytes plus 20 bytes each, are written to disk as they are and open memory-mapped
(worker/recall_index/persist.py). The hash is computed for all strings at once with numpy and
for one string in Python, the same way, so it can be stored: Python's `hash` is not (it
changes from process to process).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import mul

import numpy as np
import numpy.typing as npt

MASK = (1 << 64) - 1
PRIME = 0x100000001B3
LENGTH_MIX = 0x9E3779B97F4A7C15
HASH_BYTES = 1 << 22  # bytes of strings `all_hashes` hashes at a time


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _powers(count: int) -> list[int]:
    found = [1]
    for _ in range(count - 1):
        found.append((found[-1] * PRIME) & MASK)
    return found


# PRIME ** i (mod 2 ** 64): a string's hash is then one C-level pass (`sum(map(mul, ...))`),
# where a Python loop over its bytes cost 10 us a token, paid for each new word a store adds.
POWERS = _powers(1024)


def one_hash(data: bytes) -> int:
    powers = POWERS if len(data) <= len(POWERS) else _powers(len(data))
    value = int(sum(map(mul, data, powers))) & MASK
    return value ^ ((len(data) * LENGTH_MIX) & MASK)


def all_hashes(
    blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint64]:
    """one_hash of every string, vectorised (uint64 arithmetic wraps as the mask does), a few
    MB of strings at a time: the passes take 8 bytes of temporaries a byte (a million ids at
    once took a GB)."""
    lengths = np.diff(offsets)
    count = len(lengths)
    if count == 0:
        return np.zeros(0, dtype=np.uint64)
    longest = int(lengths.max())
    powers = np.asarray(POWERS[:longest] if longest <= len(POWERS) else _powers(longest), np.uint64)
    result = np.empty(count, dtype=np.uint64)
    start = 0
    while start < count:
        fits = int(np.searchsorted(offsets, offsets[start] + HASH_BYTES, side="right")) - 1
        end = min(count, max(start + 1, fits))
        low, high = int(offsets[start]), int(offsets[end])
        local = offsets[start : end + 1] - low
        position = np.arange(high - low, dtype=np.int64) - np.repeat(local[:-1], lengths[start:end])
        terms = blob[low:high].astype(np.uint64) * powers[position]
        sums = np.zeros(high - low + 1, dtype=np.uint64)
        np.cumsum(terms, dtype=np.uint64, out=sums[1:])
        result[start:end] = sums[local[1:]] - sums[local[:-1]]
        start = end
    mix = (lengths.astype(np.uint64) * np.uint64(LENGTH_MIX)).astype(np.uint64)
    result ^= mix
    return result


class Strings(Sequence[str]):
    """Immutable; position i is the i-th string given."""

    __slots__ = ("blob", "hashes", "offsets", "order")

    def __init__(
        self,
        blob: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.int64],
        hashes: npt.NDArray[np.uint64],
        order: npt.NDArray[np.int64],
    ) -> None:
        self.blob, self.offsets, self.hashes, self.order = blob, offsets, hashes, order

    @classmethod
    def build(cls, items: Iterable[str]) -> Strings:
        return cls.empty().extended(items)

    @classmethod
    def empty(cls) -> Strings:
        return cls(
            np.zeros(0, np.uint8),
            np.zeros(1, np.int64),
            np.zeros(0, np.uint64),
            np.zeros(0, np.int64),
        )

    def extended(self, items: Iterable[str]) -> Strings:
        """These strings and the given ones after them (positions kept)."""
        encoded = [encode(item) for item in items]
        if not encoded and len(self) > 0:
            return self
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        added = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=added[1:])
        more = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        # Only the new strings are hashed, and merged into the sorted hashes: equal hashes stay
        # in position order, as one stable sort of them all would have them.
        new_hashes = all_hashes(more, added)
        mine = np.argsort(new_hashes, kind="stable")
        at = np.searchsorted(self.hashes, new_hashes[mine], side="right")
        return Strings(
            np.concatenate([self.blob, more]),
            np.concatenate([self.offsets, self.offsets[-1] + added[1:]]),
            np.insert(self.hashes, at, new_hashes[mine]),
            np.insert(self.order, at, mine + len(self)),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "blob": self.blob,
            "offsets": self.offsets,
            "hashes": self.hashes,
            "order": self.order,
        }

    def check(self) -> None:
        """Raise ValueError if the arrays do not fit together (a damaged file)."""
        count = len(self.offsets) - 1
        if count < 0 or len(self.hashes) != count or len(self.order) != count:
            raise ValueError("strings: lengths differ")
        if count and (
            self.offsets[0] != 0
            or self.offsets[-1] != len(self.blob)
            or bool(np.any(np.diff(self.offsets) < 0))
            or bool(np.any(self.hashes[1:] < self.hashes[:-1]))
        ):
            raise ValueError("strings: offsets out of order")
        if count and (int(self.order.min()) < 0 or int(self.order.max()) >= count):
            raise ValueError("strings: order out of range")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def bytes_at(self, at: int) -> bytes:
        return self.blob[int(self.offsets[at]) : int(self.offsets[at + 1])].tobytes()

    def __getitem__(self, at: int | slice) -> str:
        if isinstance(at, slice):
            raise TypeError("Strings takes one position at a time")
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError(at)
        return self.bytes_at(at).decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        for at in range(len(self)):
            yield self[at]

    def positions(self, text: str) -> list[int]:
        """Every position holding this string (ids of dead rows may repeat a live one's)."""
        hashes = self.hashes
        count = len(hashes)
        if count == 0:
            return []
        data = encode(text)
        key = np.uint64(one_hash(data))
        low = int(hashes.searchsorted(key))
        found = []
        while low < count and hashes[low] == key:
            at = int(self.order[low])
            if self.bytes_at(at) == data:
                found.append(at)
            low += 1
        return found

    def holding(self, texts: list[str]) -> list[bool]:
        """Whether each string is here: hashed all at once, and only those whose hash is here
        compared byte by byte (a store's new ids have none: one numpy pass for a batch)."""
        if len(self.hashes) == 0 or not texts:
            return [False] * len(texts)
        encoded = [encode(text) for text in texts]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        hashes = all_hashes(blob, offsets)
        low = np.searchsorted(self.hashes, hashes, side="left")
        hit = (low < len(self.hashes)) & (
            self.hashes[np.minimum(low, len(self.hashes) - 1)] == hashes
        )
        return [bool(h) and bool(self.positions(text)) for h, text in zip(hit, texts, strict=True)]

    def find(self, text: str) -> int:
        """The first position of this string; -1 when absent."""
        found = self.positions(text)
        return min(found) if found else -1
