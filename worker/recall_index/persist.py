"""An agent's index on disk: its arrays as .npy files in a directory beside the database, opened
memory-mapped, so that the first recall after a restart reads what it touches instead of loading
every row from SQLite and tokenising it.

A cache, never the source of truth: each directory records the change-log position it is complete
through (worker/recall_index/changes.py `Mark`); a load replays the agent's changes since, and a
directory that is missing, unreadable, damaged, of another file or too far behind is ignored (the
agent loads from SQLite and is written anew). A directory is written under a temporary name,
synced, then renamed to `<agent>-<seq>`: a crash at any point leaves either the complete new
directory or none (a leftover temporary one is removed later). Opening checks that every file
has the size recorded in `meta.json` and that the lookups' offsets and slots are in range; it
does not checksum the columns (a bit flipped on disk inside a score is not detected).

Columns and vectors open copy-on-write (a rescore writes a private page, never the file) and
are saved with room for appends (the room is a hole in the file: it costs no disk). A snapshot
holds live rows only (worker/recall_index/compact.py): a removed memory leaves nothing on disk
once its agent's snapshot is rewritten (worker/recall_index/saver.py says when).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from handlers.recall.codes import words_for
from handlers.recall.vector_index import AUTO_THRESHOLD
from worker.recall_index.agent_index import COLUMNS, AgentIndex, AgentKey
from worker.recall_index.changes import Mark
from worker.recall_index.compact import compacted, renumbering, row_chunks, stems_of, subset
from worker.recall_index.frozen import CHUNK, Frozen
from worker.recall_index.lookups import Ids, MetadataLookup, SessionCodes
from worker.recall_index.mapping import FileRows
from worker.recall_index.postings import Csr, Postings, SlotLists
from worker.recall_index.strings import Strings

VERSION = 2  # 2: live rows only; the mark's memory id as its tag
STALE_TEMP_S = 3600.0  # a temporary directory this old was left by a crash


# Rows of room for appends an agent gets beyond its rows, at least, in RAM (a load from SQLite),
# so that a small agent costs what it holds (the room was 4096 rows, 6.3 MB of 384-d vectors for
# an agent of one memory); growth past the room doubles (AgentIndex._grow), copying a mapped
# column into RAM. On disk the room is a hole, which costs neither disk nor RAM until a row is
# appended there (`disk_room`).
MIN_ROOM = 16
DISK_ROOM = 16_384


def room(rows: int) -> int:
    return rows + max(MIN_ROOM, rows // 8)


def disk_room(rows: int) -> int:
    """A snapshot's rows and its room for appends, which must last from the snapshot's freeze
    until the agent is opened from the next one: the changes after which the saver writes it
    again (worker/recall_index/saver.py `due`: up to an eighth of its rows) and the stores made
    while two snapshots are written, this one and the next. A room of an eighth was outgrown
    at every snapshot from 130 000 memories stored over the bus with vectors on: the copy into
    RAM (`AgentIndex._grow`) then held twice the agent's vectors until the reopen (RSS peaks of
    0.6 GB at 140 000 memories, 2 GB at a million)."""
    return rows + DISK_ROOM + rows // 4


def agent_name(key: AgentKey) -> str:
    joined = f"{key[0]}\x00{key[1]}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(joined).hexdigest()[:32]


# (file name, array, capacity to save it with, rows of it to save: None for all, and the file
# its rows are read from rather than through a mapping, if any)
Part = tuple[str, np.ndarray, int | None, np.ndarray | None, FileRows | None]
CODES = -1  # the capacity of a part that is sign codes, laid out (words, rows): `_save_codes`


def _arrays(frozen: Frozen) -> Iterator[Part]:
    """Everything a snapshot holds: the live rows only, renumbered when some are dead."""
    rows = frozen.rows
    dead = not bool(frozen.live.all())
    kept = np.flatnonzero(frozen.live) if dead else None
    new_slot = renumbering(frozen.live)
    count = rows if kept is None else len(kept)
    for name, column in frozen.columns.items():
        yield name, column[:rows], disk_room(count), kept, None
    for number, (model, (matrix, flags)) in enumerate(frozen.vectors.items()):
        source = frozen.file_rows.get(model)
        yield f"vectors.{number}", matrix[:rows], disk_room(count), kept, source
        yield f"has_vector.{number}", flags[:rows], disk_room(count), kept, None
        if model in frozen.codes:
            yield f"codes.{number}", frozen.codes[model][:, :rows], CODES, kept, None
    ids = frozen.ids[0].extended(frozen.ids[1])
    ids = ids if kept is None else subset(ids, kept)
    sessions = frozen.sessions[0].extended(frozen.sessions[1])
    for strings, name in ((ids, "ids"), (sessions, "sessions")):
        for part, array in strings.arrays().items():
            yield f"{name}.{part}", array, None, None, None
    tokens, stems, tail = frozen.postings
    postings = tokens.merged(tail)
    if dead:
        postings = compacted(postings, new_slot)
        merged_stems = stems_of(postings.keys)
    else:
        new_tokens = [postings.keys[at] for at in range(len(tokens.keys), len(postings.keys))]
        merged_stems = Postings(tokens, stems).merged_stems(new_tokens, len(tokens.keys))
    for name, lists in (("postings", postings), ("stems", merged_stems)):
        for file, array in lists.arrays(name).items():
            yield file, array, None, None, None
    for name, (base, slots) in frozen.lists.items():
        merged = base.merged(slots)
        merged = compacted(merged, new_slot) if dead else merged
        for file, array in merged.arrays(name).items():
            yield file, array, None, None, None


def _save(
    path: Path,
    array: np.ndarray,
    capacity: int | None,
    kept: np.ndarray | None,
    source: FileRows | None = None,
) -> int:
    """Write an .npy file of array (of its rows `kept`); with a capacity, the rows then a hole
    up to it. Streamed: nothing larger than CHUNK is copied (slices of a contiguous array are
    written as they are); rows a `source` file holds are read from it."""
    if capacity == CODES:
        return _save_codes(path, array, kept)
    count = len(array) if kept is None else len(kept)
    shape = (count, *array.shape[1:]) if capacity is None else (capacity, *array.shape[1:])
    header = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False}
    with open(path, "wb") as file:
        np.lib.format.write_array_header_1_0(file, {**header, "shape": shape})
        if source is not None:
            for block in source.blocks(array, len(array), kept, CHUNK):
                _write_flat(file, block)
        elif kept is None:
            _write_flat(file, array)
        else:
            for chunk in row_chunks(array, kept):
                _write_flat(file, chunk)
        if capacity is not None:
            row_bytes = array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
            file.truncate(file.tell() + (capacity - count) * row_bytes)
        return _synced(file)


def _save_codes(path: Path, codes: np.ndarray, kept: np.ndarray | None) -> int:
    """The (words, rows) sign codes of the rows written, with room for appends after each
    word's rows: they are laid out by word, so each word's room is a hole in the middle of the
    file (a seek past it), written a word and chunk at a time."""
    count = codes.shape[1] if kept is None else len(kept)
    capacity = disk_room(count)
    header = {"descr": np.lib.format.dtype_to_descr(codes.dtype), "fortran_order": False}
    with open(path, "wb") as file:
        np.lib.format.write_array_header_1_0(file, {**header, "shape": (len(codes), capacity)})
        start = file.tell()
        for word in range(len(codes)):
            file.seek(start + word * capacity * codes.itemsize)
            if kept is None:
                _write_flat(file, codes[word])
            else:
                for chunk in row_chunks(codes[word], kept):
                    _write_flat(file, chunk)
        file.truncate(start + len(codes) * capacity * codes.itemsize)
        return _synced(file)


def _write_flat(file: BinaryIO, array: np.ndarray) -> None:
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    for at in range(0, len(flat), CHUNK):
        file.write(flat[at : at + CHUNK].data)


def _synced(file: BinaryIO) -> int:
    file.flush()
    os.fsync(file.fileno())
    return os.fstat(file.fileno()).st_size


class Store:
    """The snapshot directories of one database file's agents: `<db path>.index/`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # The agents (`agent_name`) with a directory here, listed once, then kept up to date.
        self._known: set[str] | None = None

    def name(self, key: AgentKey) -> str:
        return agent_name(key)

    def maybe_has(self, key: AgentKey) -> bool:
        if self._known is None:
            found = self.root.glob("*-*") if self.root.is_dir() else ()
            self._known = {p.name.rsplit("-", 1)[0] for p in found if p.name[0] != "."}
        return agent_name(key) in self._known

    def _versions(self, key: AgentKey) -> list[Path]:
        """The agent's directories, newest first."""
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob(f"{agent_name(key)}-*"), reverse=True)

    def write(self, frozen: Frozen) -> Path | None:
        """Write the snapshot; its directory, or None when an equal one exists already."""
        self.root.mkdir(parents=True, exist_ok=True)
        temp = self.root / f".tmp-{agent_name(frozen.key)}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        temp.mkdir()
        try:
            sizes = {f"{name}.npy": _save(temp / f"{name}.npy", array, capacity, kept, source)
                     for name, array, capacity, kept, source in _arrays(frozen)}  # fmt: skip
            meta = {
                "version": VERSION, "tenant": frozen.key[0], "agent": frozen.key[1],
                "rows": int(np.count_nonzero(frozen.live)), "anchor_ms": frozen.anchor_ms,
                "seq": frozen.mark.seq,
                "mark_tag": frozen.mark.tag, "models": list(frozen.vectors), "files": sizes,
            }  # fmt: skip
            with open(temp / "meta.json", "w", encoding="utf-8") as file:
                json.dump(meta, file)
                file.flush()
                os.fsync(file.fileno())
            _sync_dir(temp)
            final = self.root / f"{agent_name(frozen.key)}-{frozen.mark.seq:020d}"
            try:
                temp.rename(final)
            except OSError:  # another worker on the file wrote this very snapshot
                shutil.rmtree(temp, ignore_errors=True)
                return None
            _sync_dir(self.root)
            if self._known is not None:
                self._known.add(agent_name(frozen.key))
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        for older in self._versions(frozen.key):
            if older != final:
                shutil.rmtree(older, ignore_errors=True)
        return final

    def open(self, key: AgentKey) -> tuple[AgentIndex, Mark] | None:
        """The newest snapshot's index (not caught up yet) and its mark; None if there is none.
        Raises (ValueError, OSError, KeyError...) when it is damaged: the caller drops it."""
        versions = self._versions(key)
        if not versions:
            return None
        path = versions[0]
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        if meta["version"] != VERSION or (meta["tenant"], meta["agent"]) != key:
            raise ValueError("a snapshot of another version or agent")
        for name, size in meta["files"].items():
            if (path / name).stat().st_size != size:
                raise ValueError(f"{name} is not the size it was written with")
        arrays = {
            # Plain arrays over the mapping (worker/recall_index/mapping.py says why).
            name[: -len(".npy")]: np.load(path / name, mmap_mode="c").view(np.ndarray)
            for name in meta["files"]
        }
        return _index(meta, arrays, path), Mark(int(meta["seq"]), str(meta["mark_tag"]))

    def drop(self, key: AgentKey) -> None:
        for path in self._versions(key):
            shutil.rmtree(path, ignore_errors=True)
        if self._known is not None:
            self._known.discard(agent_name(key))

    def clean(self) -> None:
        """Remove temporary directories a crash left behind (not one being written now)."""
        if not self.root.is_dir():
            return
        for temp in self.root.glob(".tmp-*"):
            if time.time() - temp.stat().st_mtime > STALE_TEMP_S:
                shutil.rmtree(temp, ignore_errors=True)


def _index(meta: dict[str, object], arrays: dict[str, np.ndarray], path: Path) -> AgentIndex:
    rows = int(meta["rows"])  # type: ignore[call-overload]
    index = AgentIndex(anchor_ms=int(meta["anchor_ms"]), capacity=0)  # type: ignore[call-overload]
    capacity = len(arrays["live"])
    for name, dtype in COLUMNS.items():
        column = arrays[name]
        if column.dtype != dtype or column.shape != (capacity,):
            raise ValueError(f"column {name} has the wrong type or length")
        setattr(index, name, column)
    if capacity < rows:
        raise ValueError("columns shorter than the rows")
    parts = ("blob", "offsets", "hashes", "order")
    index.ids = Ids(Strings(*(arrays[f"ids.{p}"] for p in parts)))
    index.session_codes = SessionCodes(Strings(*(arrays[f"sessions.{p}"] for p in parts)))
    index.postings = Postings(Csr.of(arrays, "postings"), Csr.of(arrays, "stems"))
    index.tag_slots = SlotLists(Csr.of(arrays, "tag_slots"))
    index.metadata = SlotLists(Csr.of(arrays, "metadata"))
    index.tags = MetadataLookup(index.metadata)
    models: list[str] = meta["models"]  # type: ignore[assignment]
    for number, model in enumerate(models):
        matrix, flags = arrays[f"vectors.{number}"], arrays[f"has_vector.{number}"]
        if matrix.ndim != 2 or len(matrix) != capacity or flags.shape != (capacity,):
            raise ValueError("vectors of the wrong shape")
        index.vectors[str(model)], index.has_vector[str(model)] = matrix, flags
        if rows >= AUTO_THRESHOLD:  # where recall may re-score a shortlist (one descriptor each)
            found = FileRows(path / f"vectors.{number}.npy", rows, matrix.shape[1])
            index.file_rows[str(model)] = found
        codes = arrays.get(f"codes.{number}")
        if codes is not None:
            if codes.dtype != np.uint64 or codes.shape != (words_for(matrix.shape[1]), capacity):
                raise ValueError("codes of the wrong shape")
            index.codes = {**(index.codes or {}), str(model): codes}
    index.ids.base.check()
    index.session_codes.base.check()
    if len(index.ids) != rows:
        raise ValueError("ids do not match the rows")
    sessions = index.column("session")[:rows]
    if rows and int(sessions.max()) >= len(index.session_codes):
        raise ValueError("a session code out of range")
    for lists in (index.postings.base, index.tag_slots.base, index.metadata.base):
        lists.check(rows)
    index.postings.stems.check(len(index.postings.base.keys))
    index.live_count = int(np.count_nonzero(index.column("live")[:rows]))
    index.dead = rows - index.live_count
    index.disk_rows = rows
    return index


def _sync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
