"""Hostile requests on every subject the worker serves: each one is refused, nothing is written.

The triggers come from `worker.registry.ROUTES` and the mutations from each request struct's own
type description (`msgspec.inspect`), so a trigger is covered here as soon as it is registered.
Every generated request is a known-invalid mutation of a valid one, and is checked locally
against the same struct before it is sent, so that a valid request is never mistaken for a hostile
one. Contract sections 1 and 9.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import msgspec
import msgspec.inspect as mi
import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handlers.store import check_store
from schema.base import ID_PATTERN
from schema.errors import WorkerError, one_line
from schema.limits import MAX_METADATA_BYTES
from schema.memory import StoreRequest
from tests.conftest import worker_config
from tests.support import HOSTILE_TALLY as TALLY
from tests.support import Client, Reply, wait_until
from worker.app import App
from worker.registry import ROUTES
from worker.route import Route

TRIGGERS = [route.trigger for route in ROUTES]
STATUS_CODES = {"400": "invalid_request", "413": "payload_too_large"}
HOSTILE = settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


# --- the shape of each trigger's request, from its struct -------------------------------------


@dataclass(frozen=True)
class Step:
    key: str | int
    type: mi.Type
    kind: str  # "field" of a struct, "index" of a list, "key" of a dict


@dataclass(frozen=True)
class Location:
    """One place in a request where a value goes, e.g. `$.entity.relations[0].target`."""

    steps: tuple[Step, ...]
    required: bool

    @property
    def type(self) -> mi.Type:
        return plain(self.steps[-1].type)

    @property
    def path(self) -> str:
        """The path as msgspec's validation errors write it."""
        out = "$"
        for step in self.steps:
            if step.kind == "field":
                out += f".{step.key}"
            elif step.kind == "index":
                out += f"[{step.key}]"
            else:
                out += "[...]"
        return out


def plain(t: mi.Type) -> mi.Type:
    """The type without the `| UnsetType` of an optional key."""
    if isinstance(t, mi.UnionType):
        members = [m for m in t.types if not isinstance(m, mi.NoneType)]
        if len(members) == 1:
            return plain(members[0])
    return t


def locations(struct: mi.StructType, prefix: tuple[Step, ...] = ()) -> list[Location]:
    found = []
    for field in struct.fields:
        here = (*prefix, Step(field.encode_name, field.type, "field"))
        found.append(Location(here, field.required))
        found.extend(inner_locations(field.type, here))
    return found


def inner_locations(t: mi.Type, here: tuple[Step, ...]) -> list[Location]:
    t = plain(t)
    if isinstance(t, mi.StructType):
        return locations(t, here)
    if isinstance(t, mi.ListType):
        item = (*here, Step(0, t.item_type, "index"))
        return [Location(item, False), *inner_locations(t.item_type, item)]
    if isinstance(t, mi.DictType):
        value = (*here, Step("k", t.value_type, "key"))
        return [Location(value, False), *inner_locations(t.value_type, value)]
    return []


def valid_value(t: mi.Type) -> Any:
    """The smallest valid value of a type (ids are "x", numbers their lower bound)."""
    t = plain(t)
    if isinstance(t, mi.StrType):
        return "x" * max(1, t.min_length or 0)
    if isinstance(t, mi.IntType):
        if t.ge is not None:
            return t.ge
        return 0 if t.gt is None else t.gt + 1
    if isinstance(t, mi.FloatType):
        return t.ge if t.ge is not None else 0.5
    if isinstance(t, mi.BoolType):
        return False
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, mi.DictType | mi.AnyType):
        return {}
    if isinstance(t, mi.ListType):
        return [valid_value(t.item_type)] * max(1, t.min_length or 0)
    if isinstance(t, mi.StructType):
        return {f.encode_name: valid_value(f.type) for f in t.fields if f.required}
    if isinstance(t, mi.UnionType):  # one value or a list of them (a filter's `category`)
        return valid_value(t.types[0])
    raise NotImplementedError(f"no valid value for {t!r}: teach test_hostile this type")


def accepted_kinds(t: mi.Type) -> set[str]:
    """The JSON kinds a type accepts (a value of any other kind is the wrong type)."""
    t = plain(t)
    table: dict[type[mi.Type], set[str]] = {
        mi.StrType: {"string"},
        mi.IntType: {"int"},
        mi.FloatType: {"int", "float"},
        mi.BoolType: {"bool"},
        mi.DictType: {"object"},
        mi.StructType: {"object"},
        mi.ListType: {"array"},
        mi.NoneType: {"null"},
    }
    if isinstance(t, mi.LiteralType):
        return {"string" if isinstance(v, str) else "int" for v in t.values}
    if isinstance(t, mi.UnionType):
        return set().union(*(accepted_kinds(m) for m in t.types))
    for cls, kinds in table.items():
        if isinstance(t, cls):
            return kinds
    return set(KINDS)


def deep(depth: int) -> msgspec.Raw:
    """An array nested `depth` deep: [[[...]]]."""
    return msgspec.Raw(b"[" * depth + b"]" * depth)


def deep_object(depth: int) -> msgspec.Raw:
    """An object nested `depth` deep: {"a":{"a":...1}}."""
    return msgspec.Raw(b'{"a":' * depth + b"1" + b"}" * depth)


KINDS: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "string": st.text(max_size=20),
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer())
    | st.sampled_from([0.0, 1.0, -1.0, 1e300]),
    "bool": st.booleans(),
    "array": st.lists(st.integers(), max_size=3)
    | st.integers(1, 20_000).map(deep)
    | st.just([None]),
    "object": st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)
    | st.integers(1, 20_000).map(deep_object),
}
FIXED_KINDS: dict[str, list[Any]] = {
    "null": [None],
    "string": ["", "x", "1"],
    "int": [0, -1, 2**53],
    "float": [0.5, -0.0],
    "bool": [True, False],
    "array": [[], ["x"], deep(5000)],
    "object": [{}, {"x": 1}, deep_object(5000)],
}
# Number literals beyond every field's range (and past 64 bits), written as raw JSON.
HUGE_NUMBERS = [
    msgspec.Raw(b"1e400"),
    msgspec.Raw(b"-1e400"),
    msgspec.Raw(str(2**64).encode()),
    msgspec.Raw(str(-(2**63) - 1).encode()),
    msgspec.Raw(b"1" + b"0" * 400),
    msgspec.Raw(b"-1" + b"0" * 400),
]
# Raw JSON values that are not JSON, or not valid UTF-8 / UTF-16 inside a string.
BAD_TOKENS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"-NaN",
    b"+1",
    b"01",
    b".5",
    b"1e",
    b"0x1F",
    b"tru",
    b"nul",
    b"undefined",
    b"'x'",
    b"[1,]",
    b'{"a" 1}',
    b'"a\x01b"',
    b'"\x00"',
    b'"tab\tinside"',
    b'"a\xffb"',
    b'"\xc0\xaf"',
    b'"\xed\xa0\x80"',
    b'"\xe2\x82"',
    b'"\\ud800"',
    b'"\\udc00x"',
    b'"\\ud800\\u0041"',
    b'"\\x41"',
    b'"\\u12"',
    b'"unterminated',
]
INVALID_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88"]
CONTROL_BYTES = [bytes([c]) for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20))]
BLANKS = [" ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2003"]
# Values every id (agentId, sessionId, entity ids, relation types) refuses.
BAD_IDS = [" ", "\u3000", " x", "x ", "x\n", "\tx", "x\u0000y", "\u0000", "x\u007fy", "x\u0085",
           "\u200bx", "x\u202ey", "\ufeffx", "x\u2028y"]  # fmt: skip


# --- one hostile request -----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    body: bytes
    what: str
    names: tuple[str, ...] = ()  # the message must contain one of these (when not empty)
    status: str = "400"


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


def walk_to(body: dict[str, Any], steps: Sequence[Step]) -> Any:
    """The container holding the last step, creating valid parents on the way."""
    node: Any = body
    for step in steps[:-1]:
        if isinstance(node, dict) and step.key not in node:
            node[step.key] = valid_value(step.type)
        node = node[step.key]
    return node


def placed(base: dict[str, Any], loc: Location, value: Any) -> dict[str, Any]:
    body = copy.deepcopy(base)
    walk_to(body, loc.steps)[loc.steps[-1].key] = value
    return body


def without(base: dict[str, Any], loc: Location) -> dict[str, Any]:
    body = copy.deepcopy(base)
    container = walk_to(body, loc.steps)
    container.pop(loc.steps[-1].key, None)
    return body


def with_unknown(base: dict[str, Any], loc: Location | None, key: str) -> dict[str, Any]:
    body = copy.deepcopy(base)
    if loc is None:
        target = body
    else:
        container = walk_to(body, loc.steps)
        last = loc.steps[-1]
        if isinstance(container, dict) and last.key not in container:
            container[last.key] = valid_value(last.type)
        target = container[last.key]
    target[key] = 1
    return body


def struct_fields(t: mi.Type) -> set[str]:
    t = plain(t)
    return {f.encode_name for f in t.fields} if isinstance(t, mi.StructType) else set()


def in_message(key: str) -> str:
    """How a key appears in an error message (the worker keeps messages on one line)."""
    return key.replace("\r", " ").replace("\n", " ")


class Shape:
    """Everything test_hostile knows about one trigger's request."""

    def __init__(self, route: Route[Any, Any]) -> None:
        self.route = route
        info = mi.type_info(route.request_type)
        assert isinstance(info, mi.StructType)
        self.root = info
        self.locations = locations(info)
        self.required = [f.encode_name for f in info.fields if f.required]
        self.base = valid_value(info)
        self.decoder = msgspec.json.Decoder(route.request_type)

    def verdict(self, body: bytes, max_content_bytes: int) -> str | None:
        """The status a refusal must carry, by decoding locally with the same struct, or None
        when the request is valid."""
        try:
            request = self.decoder.decode(body if body.strip() else b"{}")
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
            return "400"
        if isinstance(request, StoreRequest):
            try:
                check_store(request, max_content_bytes)
            except WorkerError as error:
                return error.status
        return None

    # Fixed cases: every mutation class at every location, with representative values.

    def fixed_cases(self) -> list[Case]:
        cases = [Case(encode(v), f"non-object {v!r}") for v in (None, True, 0, 1.5, "x", [1], [])]
        cases += [Case(raw.encode(), f"non-object {raw}") for raw in ("1e400", "NaN", "[" * 9000)]
        base = encode(self.base)
        cases += [Case(base[:cut], f"truncated at {cut}") for cut in range(1, len(base), 3)]
        cases += [
            Case(base + b"x", "trailing garbage"),
            Case(base[:-1] + b",}", "trailing comma"),
            Case(b"\xef\xbb\xbf" + base, "byte order mark"),
        ]
        if b'"' in base:
            cases.append(Case(base.replace(b'"', b"'"), "single quotes"))
        cases += [Case(bad, f"invalid UTF-8 body {bad!r}") for bad in INVALID_UTF8]
        if self.required:
            names = tuple(f"`{name}`" for name in self.required)
            cases += [Case(b"", "empty body", names), Case(b" \n\t", "blank body", names)]
        for loc in self.locations:
            cases += self.fixed_at(loc)
        for key in ("x", "", "agent_id", "AGENTID", "\u2603"):
            cases += self.unknown(None, key)
        return cases

    def fixed_at(self, loc: Location) -> list[Case]:
        cases = []
        t = loc.type
        if not isinstance(t, mi.AnyType):
            for kind, values in FIXED_KINDS.items():
                if kind not in accepted_kinds(t):
                    cases += [self.value(loc, v, f"{kind} {v!r:.20}") for v in values]
            cases += [self.value(loc, v, f"out of range {v!r:.20}") for v in out_of_range(t)]
        else:
            cases += [self.value(loc, v, f"number {v!r:.20}") for v in HUGE_NUMBERS[:2]]
            cases.append(self.decode_error(loc, bytes(deep(20_000)), "deep array"))
            cases.append(self.decode_error(loc, bytes(deep_object(20_000)), "deep object"))
        cases += [self.decode_error(loc, token, f"token {token!r}") for token in BAD_TOKENS]
        if loc.required:
            cases.append(self.missing(loc))
        if isinstance(t, mi.StructType):
            cases += self.unknown(loc, "surprise")
        return cases

    def value(self, loc: Location, value: Any, what: str) -> Case:
        body = encode(placed(self.base, loc, value))
        return Case(body, f"{loc.path}: {what}", (loc.path,))

    def decode_error(self, loc: Location, raw: bytes, what: str) -> Case:
        """JSON that does not parse at this place: the decoder stops before it knows the
        field, so the message need not name it (test_a_malformed_value_names_its_field)."""
        body = encode(placed(self.base, loc, msgspec.Raw(raw)))
        return Case(body, f"{loc.path}: {what}")

    def missing(self, loc: Location) -> Case:
        key = loc.steps[-1].key
        return Case(encode(without(self.base, loc)), f"{loc.path}: missing", (f"`{key}`",))

    def unknown(self, loc: Location | None, key: str) -> list[Case]:
        """An unknown key added at the top or inside a nested struct (none if it is known)."""
        if key in struct_fields(self.root if loc is None else loc.type):
            return []
        body = encode(with_unknown(self.base, loc, key))
        where = "$" if loc is None else loc.path
        return [Case(body, f"{where}: unknown key {key!r}", (in_message(key),))]

    # Random cases, for hypothesis.

    @functools.cached_property
    def strategy(self) -> st.SearchStrategy[Case]:
        """Built once per trigger: hypothesis draws from it for every example."""
        fixed = self.fixed_cases()
        options: list[st.SearchStrategy[Case]] = [
            st.sampled_from(fixed),
            st.builds(self.random_unknown, st.text(max_size=40), st.data()),
            st.builds(self.corrupted, st.data()),
            st.builds(self.truncated, st.data()),
        ]
        if self.locations:
            locations = st.sampled_from(self.locations)
            options.append(st.builds(self.random_value_case, locations, st.data()))
        return st.one_of(options)

    def optional_base(self, data: st.DataObject) -> dict[str, Any]:
        """A valid request with some of its optional top-level keys present too."""
        body: dict[str, Any] = copy.deepcopy(self.base)
        for field in self.root.fields:
            if not field.required and data.draw(st.booleans(), label=field.encode_name):
                body[field.encode_name] = valid_value(field.type)
        return body

    def random_value_case(self, loc: Location, data: st.DataObject) -> Case:
        base = self.optional_base(data)
        t = loc.type
        if isinstance(t, mi.AnyType):
            raw = data.draw(
                st.sampled_from(BAD_TOKENS)
                | st.integers(2_000, 50_000).map(lambda n: b"[" * n + b"]" * n)
            )
            return Case(encode(placed(base, loc, msgspec.Raw(raw))), f"{loc.path}: {raw[:20]!r}")
        wrong = [KINDS[k] for k in KINDS if k not in accepted_kinds(t)]
        value = data.draw(st.one_of(*wrong, random_out_of_range(t)))
        return Case(encode(placed(base, loc, value)), f"{loc.path}: {value!r:.40}", (loc.path,))

    def random_unknown(self, key: str, data: st.DataObject) -> Case:
        structs = [loc for loc in self.locations if isinstance(loc.type, mi.StructType)]
        loc = data.draw(st.sampled_from([None, *structs]))
        known = struct_fields(self.root if loc is None else loc.type)
        if key in known:
            key += "\u0000extra"
        body = encode(with_unknown(self.optional_base(data), loc, key))
        return Case(body, f"unknown key {key!r:.40}", (in_message(key),))

    def corrupted(self, data: st.DataObject) -> Case:
        """Invalid UTF-8 or a raw control byte spliced in anywhere: never valid JSON."""
        body = encode(self.optional_base(data))
        at = data.draw(st.integers(0, len(body)))
        bad = data.draw(st.sampled_from(INVALID_UTF8 + CONTROL_BYTES))
        return Case(body[:at] + bad + body[at:], f"{bad!r} spliced in at {at}")

    def truncated(self, data: st.DataObject) -> Case:
        body = encode(self.optional_base(data))
        cut = data.draw(st.integers(1, len(body) - 1))
        return Case(body[:cut], f"truncated at {cut}")


def out_of_range(t: mi.Type) -> list[Any]:
    """Fixed values of the right JSON kind that the type's bounds refuse."""
    values: list[Any] = []
    if isinstance(t, mi.StrType):
        if t.min_length:
            values.append("")
        if t.pattern is not None:  # an id (schema/base.py ID_PATTERN)
            values += BAD_IDS
        if t.max_length is not None:
            values.append("x" * (t.max_length + 1))
            values.append("é" * (t.max_length + 1))
    elif isinstance(t, mi.IntType | mi.FloatType):
        if t.ge is not None or t.gt is not None:
            values += [HUGE_NUMBERS[1], HUGE_NUMBERS[3], HUGE_NUMBERS[5]]
            low = t.ge if t.ge is not None else t.gt
            assert low is not None
            values.append(low - 1)
        if t.le is not None or t.lt is not None:
            values += [HUGE_NUMBERS[0], HUGE_NUMBERS[2], HUGE_NUMBERS[4]]
            high = t.le if t.le is not None else t.lt
            assert high is not None
            values.append(high + 1)
    elif isinstance(t, mi.LiteralType):
        values += ["", "robot", "USER", " user", "user\u0000"]
    elif isinstance(t, mi.ListType):
        if t.min_length:
            values.append([])
        if t.max_length is not None:
            values.append([valid_value(t.item_type)] * (t.max_length + 1))
    return values


def random_out_of_range(t: mi.Type) -> st.SearchStrategy[Any]:
    options: list[st.SearchStrategy[Any]] = []
    fixed = out_of_range(t)
    if fixed:
        options.append(st.sampled_from(fixed))
    # Hypothesis draws text of at most about 8 KiB; a longer limit keeps its fixed cases.
    if isinstance(t, mi.StrType) and t.max_length is not None and t.max_length < 8000:
        options.append(st.text(min_size=t.max_length + 1, max_size=t.max_length + 30))
    if isinstance(t, mi.IntType):
        if t.ge is not None:
            options.append(st.integers(-(2**63), t.ge - 1))
        if t.le is not None and t.le < 2**63 - 1:
            options.append(st.integers(t.le + 1, 2**63 - 1))
    if isinstance(t, mi.FloatType):
        if t.ge is not None:
            low = t.ge
            below = st.floats(max_value=low, allow_nan=False, allow_infinity=False)
            options.append(below.filter(lambda f: f < low))
        if t.le is not None:
            high = t.le
            above = st.floats(min_value=high, allow_nan=False, allow_infinity=False)
            options.append(above.filter(lambda f: f > high))
    if isinstance(t, mi.LiteralType):
        values = set(t.values)
        options.append(st.text(max_size=12).filter(lambda s: s not in values))
    return st.one_of(options) if options else st.nothing()


def store_cases(limit: int) -> st.SearchStrategy[Case]:
    """memory::store's own limits: content size and blankness, metadata size (section 2)."""
    filler = st.sampled_from(["x", "é", "€", "😀"])

    def oversize_content(char: str, extra: int) -> Case:
        width = len(char.encode())
        content = char * (limit // width) + "x" * (limit % width + extra)
        body = encode({"agentId": "x", "content": content})
        return Case(body, f"content of {limit + extra} bytes", ("$.content",), "413")

    def oversize_metadata(extra: int, nested: bool) -> Case:
        blob = "x" * (MAX_METADATA_BYTES - 11 + extra)
        metadata: Any = {"blob": blob}
        if nested:
            metadata = {"a": [{"b": [blob[: len(blob) // 2]]}, blob[len(blob) // 2 :]]}
        body = encode({"agentId": "x", "content": "x", "metadata": metadata})
        return Case(body, f"metadata over 16 KiB by {extra}", ("$.metadata",), "413")

    def blank(content: str) -> Case:
        body = encode({"agentId": "x", "content": content})
        return Case(body, f"blank content {content!r}", ("$.content",))

    return st.one_of(
        st.builds(oversize_content, filler, st.integers(1, 2_000)),
        st.builds(oversize_metadata, st.integers(1, 5_000), st.booleans()),
        st.builds(blank, st.text(alphabet=st.sampled_from(BLANKS), max_size=12)),
    )


def store_fixed_cases(limit: int) -> list[Case]:
    return [
        Case(encode({"agentId": "x", "content": "x" * (limit + 1)}), "content +1", ("$.content",),
             "413"),
        Case(encode({"agentId": "x", "content": "é" * (limit // 2 + 1)}), "content é",
             ("$.content",), "413"),
        Case(encode({"agentId": "x", "content": "x", "metadata": {"b": "x" * MAX_METADATA_BYTES}}),
             "metadata", ("$.metadata",), "413"),
        Case(encode({"agentId": "x", "content": ""}), "empty content", ("$.content",)),
        Case(encode({"agentId": "x", "content": " \t\n\u00a0"}), "blank", ("$.content",)),
        Case(encode({"agentId": "x", "content": "x", "sessionId": ""}), "empty session",
             ("$.sessionId",)),
    ]  # fmt: skip


SHAPES = {route.trigger: Shape(route) for route in ROUTES}


# --- the checks every hostile request must pass -------------------------------------------------


def snapshot(db_path: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read by a connection of our own."""
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return every_row(conn)
    finally:
        conn.close()


def every_row(conn: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    tables = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        table: sorted((tuple(row) for row in conn.execute(f'SELECT * FROM "{table}"')), key=repr)
        for table in tables
    }


class Rows:
    """Every row of every table, as `snapshot` reads them, on one connection kept open; read
    again only when another connection committed since the last read (SQLite's data_version
    changes exactly then), which a refused request never does. Thousands of requests are
    checked per test: reading every table twice for each was most of the module's time."""

    def __init__(self, db_path: str) -> None:
        self.conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
        self.version: int | None = None
        self.rows: dict[str, list[tuple[Any, ...]]] = {}

    def now(self) -> dict[str, list[tuple[Any, ...]]]:
        version = self.conn.execute("PRAGMA data_version").fetchall()[0][0]
        assert isinstance(version, int)
        if version != self.version:  # a commit landing meanwhile changes it again: read anew
            self.version, self.rows = version, every_row(self.conn)
        return self.rows


@pytest.fixture
def rows(worker: App) -> Iterator[Rows]:
    reader = Rows(worker.config.db_path)
    yield reader
    reader.conn.close()


def assert_refused(case: Case, reply: Reply) -> None:
    assert reply.code == case.status, (case.what, reply)
    error = reply.body["error"]
    assert error["code"] == STATUS_CODES[case.status], (case.what, reply)
    assert isinstance(error["message"], str) and error["message"].strip(), (case.what, reply)
    assert reply.description == error["message"], (case.what, reply)
    assert "\n" not in error["message"] and "\r" not in error["message"], (case.what, reply)
    if case.names:
        # Messages escape characters a one-line header cannot carry; names are escaped alike.
        names = [one_line(name) for name in case.names]
        assert any(name in error["message"] for name in names), (case.what, reply)


async def send_hostile(client: Client, worker: App, rows: Rows, trigger: str, case: Case) -> None:
    """Send one hostile request; it must be refused, change nothing, and leave the worker up."""
    verdict = SHAPES[trigger].verdict(case.body, worker.config.max_content_bytes)
    assert verdict == case.status, f"test bug: {case.what} is not refused locally as {case.status}"
    before = rows.now()
    TALLY["tried"] += 1
    reply = await client.raw(trigger, case.body, timeout=10)
    assert_refused(case, reply)
    TALLY["refused"] += 1
    assert rows.now() == before, case.what
    still = await client.call("memory::store", {"agentId": "x", "content": "still serving"})
    assert still.ok, (case.what, still)


@pytest.fixture
async def seeded(client: Client) -> Client:
    """A database that has something to lose: memories and a session of the agent `x`."""
    await client.store("x", "seed one", sessionId="x")
    await client.store("x", "seed two", role="assistant", importance=0.1, timestamp=0)
    await client.store("y", "seed one", sessionId="x", metadata={"k": [1, 2]})
    await client.store("x", "still serving")
    return client


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", TRIGGERS)
async def test_every_fixed_hostile_request_is_refused_naming_the_field(
    seeded: Client, worker: App, rows: Rows, trigger: str
) -> None:
    """Every mutation class at every field of the trigger's request (null, wrong JSON kind,
    out of range, huge numbers, bad tokens, bad UTF-8, deep nesting, missing and unknown keys,
    non-objects, truncation, empty body) is refused with a 4xx naming the field; nothing is
    written and the worker keeps serving."""
    cases = SHAPES[trigger].fixed_cases()
    if trigger == "memory::store":
        cases += store_fixed_cases(worker.config.max_content_bytes)
    for case in cases:
        await send_hostile(seeded, worker, rows, trigger, case)


@pytest.mark.parametrize("trigger", TRIGGERS)
@HOSTILE
@given(data=st.data())
async def test_random_hostile_requests_are_refused_and_write_nothing(
    seeded: Client, worker: App, rows: Rows, trigger: str, data: st.DataObject
) -> None:
    """Random invalid mutations of a valid request get a 4xx reply (never a timeout) that names
    the field at fault; the database is unchanged and the worker keeps serving."""
    strategy = SHAPES[trigger].strategy
    if trigger == "memory::store":
        strategy = strategy | store_cases(worker.config.max_content_bytes)
    case = data.draw(strategy, label="case")
    await send_hostile(seeded, worker, rows, trigger, case)


HOSTILE_TEXT = st.text(min_size=1, max_size=40) | st.sampled_from(
    ["\u0000", "\u0000x", "\u202e\u0644", "😀" * 3, "a\r\nb", "\ufeff", "\x7f", "%", "_", "'; --"]
)
# The hostile text an id may hold: no control or invisible formatting characters, no whitespace
# at either end (schema/base.py ID_PATTERN).
HOSTILE_ID = (
    st.text(min_size=1, max_size=40)
    | st.sampled_from(["\u202f\u0644x", "😀" * 3, "a b", "%", "_", "'; --"])
).filter(lambda s: re.search(ID_PATTERN, s) is not None)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f == 0 or abs(f) > 1e-300)
    | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=12,
)


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    agent=HOSTILE_ID,
    content=HOSTILE_TEXT.filter(lambda s: bool(s.strip())),
    session=HOSTILE_ID,
    metadata=st.dictionaries(HOSTILE_TEXT, JSON_VALUES, max_size=4),
)
async def test_hostile_but_valid_values_round_trip_exactly(
    client: Client, agent: str, content: str, session: str, metadata: dict[str, Any]
) -> None:
    """Control characters, NUL, bidi marks, emoji, SQL-ish text and numbers past 64 bits in
    content and metadata, and any text an id allows, are stored and recalled exactly as sent,
    under that exact agent id."""
    stored = await client.store(agent, content, sessionId=session, metadata=metadata)
    memories = await client.recall(agent, content, limit=100)
    [memory] = [m for m in memories if m["id"] == stored["id"]]
    assert memory["content"] == content
    if stored["stored"]:  # a repeat keeps the first store's session and metadata
        assert memory["sessionId"] == session
        assert memory["metadata"] == metadata


# --- overload: 503 past max_in_flight -----------------------------------------------------------


@dataclass
class HeldEmbedder:
    asked: list[str]  # the texts it was asked to embed
    gate: asyncio.Event  # it answers once this is set


@pytest.fixture
async def held_embedder(nats_url: str) -> AsyncIterator[HeldEmbedder]:
    """A stub `embedding.generate` that holds every answer until the test opens its gate."""
    nc = await nats.connect(nats_url)
    held = HeldEmbedder([], asyncio.Event())
    asked = held.asked
    pending: set[asyncio.Task[None]] = set()

    async def answer(msg: Any) -> None:
        await held.gate.wait()
        await msg.respond(encode({"embedding": [1.0, 0.5, 0.25, 0.125]}))

    async def on_request(msg: Any) -> None:
        asked.append(msgspec.json.decode(msg.data)["text"])
        task = asyncio.create_task(answer(msg))
        pending.add(task)
        task.add_done_callback(pending.discard)

    await nc.subscribe("embedding.generate", cb=on_request)
    await nc.flush()
    yield held
    for task in list(pending):
        task.cancel()
    await nc.close()


async def test_past_max_in_flight_requests_get_503_and_nothing_half_written(
    nats_url: str, tmp_path: Path, held_embedder: HeldEmbedder
) -> None:
    """With max_in_flight=2 and an embedder that holds its answers, 10 stores at once: 2 are
    stored in full (memory, embedding, session) once it answers, 8 get 503 `unavailable` meanwhile
    and leave no trace at all."""
    app = App(worker_config(nats_url, tmp_path / "memory.db", embedder="bus", max_in_flight=2))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        calls = [
            asyncio.ensure_future(client.call("memory::store", {"agentId": "a",
                                  "content": f"note {i}", "sessionId": f"s{i}"}))
            for i in range(10)
        ]  # fmt: skip
        await wait_until(
            lambda: sum(call.done() for call in calls) >= 8, "8 stores refused meanwhile"
        )
        held_embedder.gate.set()
        replies = await asyncio.gather(*calls)
        served = [i for i, reply in enumerate(replies) if reply.ok]
        refused = [i for i, reply in enumerate(replies) if not reply.ok]
        assert len(served) == 2 and len(refused) == 8, replies
        for i in refused:
            reply = replies[i]
            assert reply.code == "503" and reply.body["error"]["code"] == "unavailable"
            assert reply.description == reply.body["error"]["message"] != ""
        assert sorted(held_embedder.asked) == sorted(f"note {i}" for i in served)
        tables = snapshot(app.config.db_path)
        # memories: id, tenant, agent_id, role, content, ...; sessions and session_messages:
        # tenant, agent_id, then the session id
        assert sorted(row[4] for row in tables["memories"]) == [f"note {i}" for i in served]
        assert all(row[14] == "bus" and row[13] for row in tables["memories"])
        assert sorted(row[2] for row in tables["sessions"]) == [f"s{i}" for i in served]
        assert sorted(row[2] for row in tables["session_messages"]) == [f"s{i}" for i in served]
        assert app.dispatcher is not None and app.dispatcher.in_flight == 0
        again = await client.call("memory::store", {"agentId": "a", "content": "after the rush"})
        assert again.ok, again
    finally:
        await nc.close()
        await app.stop()


# --- bugs found here ------------------------------------------------------------------------------


def release(app: App) -> None:
    """What App.stop() leaves open when it fails half-way: the writer thread and the files."""
    if app.services is not None:
        app.services.writer.stop()
        app.services.readers.close()
    if app._conn is not None:
        app._conn.close()


HUGE = 530_000
ECHOED = [
    ("memory::store", b'{"agentId": "a", "content": "x", "' + b"k" * HUGE + b'": 1}'),
    ("memory::store", b'{"agentId": "a", "content": "x", "role": "' + b"r" * HUGE + b'"}'),
    ("memory::recall", b'{"agentId": "a", "roles": ["' + b"r" * HUGE + b'"]}'),
]


@pytest.mark.parametrize(("trigger", "body"), ECHOED, ids=["unknown-key", "role", "roles"])
async def test_a_huge_echoed_value_still_gets_a_reply_and_the_worker_survives(
    nats_url: str, tmp_path: Path, trigger: str, body: bytes
) -> None:
    """A 530 KB unknown key or enum value is refused with a short 400 message, and the worker
    keeps serving afterwards."""
    app = App(worker_config(nats_url, tmp_path / "memory.db"))
    await app.start()
    nc = await nats.connect(nats_url)
    try:
        client = Client(nc)
        TALLY["tried"] += 1
        reply = await client.raw(trigger, body, timeout=1)
        assert reply.code == "400" and len(reply.body["error"]["message"]) < 2_000
        TALLY["refused"] += 1
        assert (await client.call("memory::store", {"agentId": "a", "content": "up"})).ok
    finally:
        await nc.close()
        await app.stop()  # also when the server closed the connection: stop() copes


async def test_an_error_header_is_one_printable_line(client: Client) -> None:
    """An unknown key full of control and line-separator characters still gives a header that
    is one line of printable text."""
    key = "k\u0000\u000b\u000c\u001c\u0085\u2028\u2029\u001b[31m"
    TALLY["tried"] += 1
    reply = await client.call("memory::store", {"agentId": "a", "content": "x", key: 1})
    assert reply.code == "400"
    TALLY["refused"] += 1
    assert reply.description is not None
    assert len(reply.description.splitlines()) == 1
    assert reply.description.isprintable(), repr(reply.description)


MALFORMED_IN_A_FIELD = [
    ("memory::store", b'{"agentId": "a", "content": "bad \xff byte"}', "$.content"),
    ("memory::store", b'{"agentId": "a", "content": "x", "importance": NaN}', "$.importance"),
    ("memory::store", b'{"agentId": "\\ud800", "content": "x"}', "$.agentId"),
    ("memory::store", b'{"agentId": "a", "content": "raw \x01 control"}', "$.content"),
    ("memory::store",
     b'{"agentId": "a", "content": "x", "metadata": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
     "$.metadata"),
    ("memory::recall", b'{"agentId": "a", "limit": Infinity}', "$.limit"),
]  # fmt: skip


async def test_a_malformed_value_names_its_field(client: Client) -> None:
    """A value that is not valid JSON (or not UTF-8) is refused with a message naming the key
    it was given for, as contract section 9 asks of every refusal."""
    unnamed = []
    for trigger, body, field in MALFORMED_IN_A_FIELD:
        TALLY["tried"] += 1
        reply = await client.raw(trigger, body)
        assert reply.code == "400", reply
        TALLY["refused"] += 1
        if field not in reply.body["error"]["message"]:
            unnamed.append((field, reply.body["error"]["message"]))
    assert unnamed == []


async def test_the_worker_stops_cleanly_after_losing_its_connection(
    nats_url: str, tmp_path: Path
) -> None:
    """When the NATS connection was closed under the worker (server-side close, max payload
    violation), stop() still finishes: writer stopped, database closed, no exception."""
    app = App(worker_config(nats_url, tmp_path / "memory.db"))
    await app.start()
    assert app.nc is not None
    await app.nc.close()
    try:
        await app.stop()
    except Exception:
        release(app)
        raise
