"""Bearer tokens for the doors beside the bus: MCP over HTTP, and the memory browser after it.

A deployer lists who may come in as a JSON file that a variable names
(`MEMORY_WORKER_MCP_TOKENS`; the browser's `MEMORY_WORKER_UI_TOKENS` has the same form):

    {"<name>": {"sha256": "<64 hex digits: the SHA-256 of the token>",
                "agents": ["<agent id or fnmatch pattern>", ...]}, ...}

The file holds hashes only, so a copy of it lets no one in. A presented token is hashed and
compared with every entry in constant time, so the time taken says nothing about how close a
guess came. A token acts for the agents its patterns match and for no other.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any

import msgspec

Sha256Hex = Annotated[str, msgspec.Meta(pattern=r"\A[0-9a-fA-F]{64}\Z")]
AgentPattern = Annotated[str, msgspec.Meta(min_length=1)]


class _Entry(msgspec.Struct):
    sha256: Sha256Hex
    agents: Annotated[list[AgentPattern], msgspec.Meta(min_length=1)]


class TokenFileError(ValueError):
    """The token file cannot be used; the message is one line that names the variable."""


@dataclass(frozen=True)
class Token:
    name: str
    digest: bytes  # SHA-256 of the token
    agents: tuple[str, ...]  # fnmatch patterns over agent ids

    def allows(self, agent: str) -> bool:
        return any(fnmatchcase(agent, pattern) for pattern in self.agents)


class Tokens:
    """The entries of one token file, looked up by the token presented or by name."""

    def __init__(self, tokens: Iterable[Token]) -> None:
        self._tokens = tuple(tokens)
        self._named = {token.name: token for token in self._tokens}

    def find(self, presented: str) -> Token | None:
        """The entry whose hash is presented's, comparing with every entry in constant time."""
        digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
        found = None
        for token in self._tokens:
            if hmac.compare_digest(digest, token.digest):
                found = token
        return found

    def named(self, name: str) -> Token | None:
        return self._named.get(name)

    def __len__(self) -> int:
        return len(self._tokens)


def tokens_from_env(variable: str, environ: Mapping[str, str]) -> Tokens | None:
    """The file variable names, read and checked; None when it is unset or empty."""
    path = environ.get(variable, "")
    return load_tokens(variable, path) if path else None


def load_tokens(variable: str, path: str) -> Tokens:
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise TokenFileError(f"{variable}: cannot read {path}: {error.strerror}") from None
    try:
        entries = msgspec.json.decode(raw)
    except msgspec.DecodeError as error:
        raise TokenFileError(f"{variable}: {path} is not JSON: {error}") from None
    if not isinstance(entries, dict):
        raise TokenFileError(
            f'{variable}: {path} is not a JSON object of "<name>": {{"sha256": ..., '
            '"agents": [...]}'
        )
    if not entries:
        raise TokenFileError(f"{variable}: {path} names no tokens")
    tokens: list[Token] = []
    for name, fields in entries.items():
        try:
            entry = msgspec.convert(fields, _Entry)
        except msgspec.ValidationError as error:
            raise TokenFileError(
                f"{variable}: {path}: token {name!r}: {_what(error)} (each entry is "
                '{"sha256": "<64 hex digits>", "agents": ["<agent id or pattern>", ...]})'
            ) from None
        tokens.append(Token(name, bytes.fromhex(entry.sha256), tuple(entry.agents)))
    seen: dict[bytes, str] = {}
    for token in tokens:
        if token.digest in seen:
            raise TokenFileError(
                f"{variable}: {path}: tokens {seen[token.digest]!r} and {token.name!r} have "
                "the same sha256"
            )
        seen[token.digest] = token.name
    return Tokens(tokens)


def _what(error: msgspec.ValidationError) -> str:
    """msgspec's message, with its regex for a hash said in words."""
    return re.sub(r"`str` matching regex '[^']*'", "64 hex digits", str(error))


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe, fit for an Authorization header."""
    return secrets.token_urlsafe(32)


def entry(token: str, agents: Iterable[str]) -> dict[str, Any]:
    """The file's entry for token: its hash, never the token itself."""
    return {"sha256": hashlib.sha256(token.encode()).hexdigest(), "agents": list(agents)}


def add_entry(path: str, name: str, token: str, agents: Iterable[str]) -> None:
    """Add name's entry for token to the token file at path (a new file is readable by its
    owner only); the file is replaced whole, so a reader never sees half of it.

    Raises TokenFileError (naming --file) for a file that is not a token file, and KeyError
    when it already has an entry of that name."""
    target = Path(path)
    entries: dict[str, Any] = {}
    if target.exists():
        load_tokens("--file", path)  # refuses a file that is not a token file, naming why
        entries = msgspec.json.decode(target.read_bytes())
        if name in entries:
            raise KeyError(name)
    entries[name] = entry(token, agents)
    text = msgspec.json.format(msgspec.json.encode(entries), indent=2) + b"\n"
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o600
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(descriptor, mode)  # an existing file keeps its mode
        with os.fdopen(descriptor, "wb") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
