"""NATS decentralized auth for tests, minted in-process (no `nsc`): an operator, an account with
JetStream, a user, the server's resolver config and the user's `.creds` file.

A NATS JWT is `base64url(header).base64url(claims).base64url(ed25519 signature)`, header
`{"typ": "JWT", "alg": "ed25519-nkey"}`, signed by the issuer's nkey; `jti` is the base32
SHA-512/256 of the claims without it. Needs the `nkeys` package (nats-py's `nkeys` extra).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNLIMITED = -1


def _nkeys() -> Any:
    return importlib.import_module("nkeys")


@dataclass(frozen=True)
class Identity:
    seed: bytes
    public: str

    def sign(self, data: bytes) -> bytes:
        signature: bytes = _nkeys().from_seed(self.seed).sign(data)
        return signature


def new_identity(kind: str) -> Identity:
    """kind: operator, account or user."""
    nkeys = _nkeys()
    prefix = {
        "operator": nkeys.PREFIX_BYTE_OPERATOR,
        "account": nkeys.PREFIX_BYTE_ACCOUNT,
        "user": nkeys.PREFIX_BYTE_USER,
    }[kind]
    seed: bytes = nkeys.encode_seed(os.urandom(32), prefix)
    public: bytes = nkeys.from_seed(seed).public_key
    return Identity(seed=seed, public=public.decode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode_jwt(issuer: Identity, subject: str, name: str, nats: dict[str, Any]) -> str:
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public,
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    claims["jti"] = base64.b32encode(hashlib.new("sha512_256", _json(claims)).digest()).decode()
    claims["jti"] = claims["jti"].rstrip("=")
    signing_input = _b64(_json({"typ": "JWT", "alg": "ed25519-nkey"})) + "." + _b64(_json(claims))
    return signing_input + "." + _b64(issuer.sign(signing_input.encode()))


@dataclass(frozen=True)
class Trust:
    """An operator, its system account and one account for clients: what the server trusts."""

    operator: Identity
    operator_jwt: str
    system: Identity
    system_jwt: str
    account: Identity
    account_jwt: str

    def server_conf(self, folder: Path) -> str:
        """nats-server config lines: operator mode with the account preloaded in memory."""
        operator_path = folder / "operator.jwt"
        operator_path.write_text(self.operator_jwt, encoding="utf-8")
        return (
            f"operator: {json.dumps(str(operator_path))}\n"
            f"system_account: {self.system.public}\n"
            "resolver: MEMORY\n"
            "resolver_preload: {\n"
            f"  {self.system.public}: {json.dumps(self.system_jwt)}\n"
            f"  {self.account.public}: {json.dumps(self.account_jwt)}\n"
            "}\n"
        )


def new_trust(name: str = "test") -> Trust:
    operator, system, account = (new_identity(kind) for kind in ("operator", "account", "account"))
    operator_jwt = encode_jwt(
        operator,
        operator.public,
        f"{name}-operator",
        {"type": "operator", "system_account": system.public},
    )
    system_jwt = encode_jwt(operator, system.public, "SYS", {"type": "account"})
    limits = {
        "subs": UNLIMITED,
        "data": UNLIMITED,
        "payload": UNLIMITED,
        "imports": UNLIMITED,
        "exports": UNLIMITED,
        "wildcards": True,
        "conn": UNLIMITED,
        "leaf": UNLIMITED,
        "mem_storage": UNLIMITED,
        "disk_storage": UNLIMITED,
        "streams": UNLIMITED,
        "consumer": UNLIMITED,
    }
    account_jwt = encode_jwt(
        operator, account.public, f"{name}-account", {"type": "account", "limits": limits}
    )
    return Trust(operator, operator_jwt, system, system_jwt, account, account_jwt)


def write_creds(trust: Trust, path: Path, name: str = "memory") -> Path:
    """A user of trust's account, as a `.creds` file (the format `nsc` writes)."""
    user = new_identity("user")
    user_jwt = encode_jwt(
        trust.account,
        user.public,
        name,
        {
            "type": "user",
            "pub": {},
            "sub": {},
            "subs": UNLIMITED,
            "data": UNLIMITED,
            "payload": UNLIMITED,
        },
    )
    path.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed.decode()}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n",
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path
