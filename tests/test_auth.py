"""The worker on NATS servers that require credentials: user/password, token, a `.creds` file
(operator/account/user JWTs) and mutual TLS. Each server is a real nats-server configured that
way; wrong credentials must stop start-up quickly with a message that says what went wrong."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.auth_jwt import new_trust, write_creds
from tests.auth_pki import Pki, make_pki, openssl_available
from tests.conftest import start_nats, stop_nats, worker_config
from tests.support import Client
from worker.app import App

# A worker with credentials the server refuses must say so at once: the server answers a bad
# CONNECT or TLS handshake in milliseconds (a whole start takes ~30 ms), so 1 s is plenty.
FAIL_FAST_SECONDS = 1.0
PASSWORD = 'pa ss"word'
TOKEN = "s3cr3t-t0ken"


@dataclass
class Secured:
    """A running nats-server that requires credentials, and how to get in."""

    url: str
    folder: Path
    worker: dict[str, str]  # Config overrides that authenticate the worker
    client: dict[str, Any]  # nats.connect() options for another authenticated client
    anonymous: dict[str, Any] = field(default_factory=dict)  # options the server must refuse
    pki: Pki | None = None


@contextlib.contextmanager
def running_server(folder: Path, conf: str) -> Iterator[str]:
    folder.mkdir(parents=True, exist_ok=True)
    conf_path = folder / "nats-server.conf"
    conf_path.write_text(conf, encoding="utf-8")
    process, url = start_nats(folder / "store", "-c", str(conf_path))
    try:
        yield url
    finally:
        stop_nats(process)


def tls_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


@pytest.fixture
def userpass(tmp_path: Path) -> Iterator[Secured]:
    users = [
        {"user": "memory", "password": PASSWORD},
        {"user": "agent", "password": "agent-password"},
    ]
    conf = f"authorization {{\n  users = {json.dumps(users)}\n}}\n"
    with running_server(tmp_path / "userpass", conf) as url:
        yield Secured(
            url=url,
            folder=tmp_path,
            worker={"nats_user": "memory", "nats_password": PASSWORD},
            client={"user": "agent", "password": "agent-password"},
        )


@pytest.fixture
def token(tmp_path: Path) -> Iterator[Secured]:
    conf = f"authorization {{\n  token: {json.dumps(TOKEN)}\n}}\n"
    with running_server(tmp_path / "token", conf) as url:
        yield Secured(
            url=url, folder=tmp_path, worker={"nats_token": TOKEN}, client={"token": TOKEN}
        )


@pytest.fixture
def creds(tmp_path: Path) -> Iterator[Secured]:
    pytest.importorskip(
        "nkeys", reason="creds files need nats-py's nkeys extra (pip install nkeys)"
    )
    trust = new_trust()
    folder = tmp_path / "jwt"
    folder.mkdir()
    worker_creds = write_creds(trust, folder / "memory.creds", "memory")
    agent_creds = write_creds(trust, folder / "agent.creds", "agent")
    with running_server(folder, trust.server_conf(folder)) as url:
        yield Secured(
            url=url,
            folder=tmp_path,
            worker={"nats_creds": str(worker_creds)},
            client={"user_credentials": str(agent_creds)},
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if not openssl_available():
        pytest.skip("the openssl command is needed to make test certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def mtls(tmp_path: Path, pki: Pki) -> Iterator[Secured]:
    conf = (
        "tls {\n"
        f"  cert_file: {json.dumps(str(pki.server_cert))}\n"
        f"  key_file: {json.dumps(str(pki.server_key))}\n"
        f"  ca_file: {json.dumps(str(pki.ca))}\n"
        "  verify: true\n"
        "  timeout: 2\n"
        "}\n"
    )
    with running_server(tmp_path / "mtls", conf) as url:
        yield Secured(
            url=url.replace("nats://", "tls://", 1),
            folder=tmp_path,
            worker={
                "nats_tls_ca": str(pki.ca),
                "nats_tls_cert": str(pki.client_cert),
                "nats_tls_key": str(pki.client_key),
            },
            client={"tls": tls_context(pki.ca, pki.client_cert, pki.client_key)},
            anonymous={"tls": tls_context(pki.ca)},  # trusts the server, shows no certificate
            pki=pki,
        )


@contextlib.asynccontextmanager
async def started_worker(secured: Secured, *, ingest: bool = False) -> AsyncIterator[App]:
    """The worker authenticated as secured.worker says (ingest off unless asked: stopping it
    waits for a JetStream fetch, a second per test)."""
    config = worker_config(
        secured.url, secured.folder / "memory.db", ingest=ingest, **secured.worker
    )
    app = App(config)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


@contextlib.asynccontextmanager
async def client_of(secured: Secured) -> AsyncIterator[Client]:
    nc = await nats.connect(secured.url, allow_reconnect=False, **secured.client)
    try:
        yield Client(nc)
    finally:
        await nc.close()


async def refused(url: str, **options: Any) -> str:
    """Connect as a plain client that must be turned away; return why it was."""
    try:
        nc = await nats.connect(
            url, allow_reconnect=False, connect_timeout=2, error_cb=_quiet, **options
        )
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    await nc.close()
    raise AssertionError(f"{url} let in a client with {sorted(options) or 'no credentials'}")


async def _quiet(error: Exception) -> None:
    pass


async def start_up_error(secured: Secured, **overrides: str) -> str:
    """Start a worker with these (wrong) settings: it must raise within FAIL_FAST_SECONDS."""
    settings = {**secured.worker, **overrides}
    config = worker_config(secured.url, secured.folder / "memory.db", ingest=False, **settings)
    app = App(config)
    try:
        await asyncio.wait_for(app.start(), FAIL_FAST_SECONDS)
    except TimeoutError:
        pytest.fail(f"App.start() kept retrying for {FAIL_FAST_SECONDS}s instead of failing")
    except Exception as error:
        return str(error)
    finally:
        await app.stop()
    pytest.fail("App.start() succeeded with wrong credentials")


async def assert_store_and_recall(secured: Secured) -> None:
    """A store and a recall from another client authenticated on the same server."""
    async with client_of(secured) as client:
        stored = await client.store("a1", "The deploy key rotates on Fridays")
        assert stored["stored"] is True
        memories = await client.recall("a1", "when does the deploy key rotate?")
        assert [memory["id"] for memory in memories] == [stored["id"]]
        assert memories[0]["content"] == "The deploy key rotates on Fridays"


# --- serving -------------------------------------------------------------------------------


async def test_user_and_password_authenticate_the_worker_and_anonymous_clients_are_refused(
    userpass: Secured,
) -> None:
    async with started_worker(userpass):
        await assert_store_and_recall(userpass)
    assert "Authorization Violation" in await refused(userpass.url)


async def test_a_token_authenticates_the_worker_and_anonymous_clients_are_refused(
    token: Secured,
) -> None:
    async with started_worker(token):
        await assert_store_and_recall(token)
    assert "Authorization Violation" in await refused(token.url)


async def test_a_creds_file_authenticates_the_worker_on_an_operator_mode_server(
    creds: Secured,
) -> None:
    """Operator -> account -> user JWTs; the worker's account has JetStream, so ingest starts."""
    async with started_worker(creds, ingest=True) as app:
        assert app.ingest is not None, "durable ingest should start: the account has JetStream"
        await assert_store_and_recall(creds)
    assert "Authorization Violation" in await refused(creds.url)


async def test_mutual_tls_carries_store_and_recall_and_a_client_without_a_certificate_is_refused(
    mtls: Secured,
) -> None:
    async with started_worker(mtls):
        await assert_store_and_recall(mtls)
    await refused(mtls.url, **mtls.anonymous)  # raises if it is let in


# --- wrong credentials at start-up -------------------------------------------------------


@dataclass(frozen=True)
class Wrong:
    server: str  # the fixture that runs the server
    settings: Callable[[Secured], dict[str, str]]  # the worker's wrong config overrides
    says: str  # what the start-up error must mention (case-insensitive), besides the URL


def _rogue_creds(secured: Secured) -> dict[str, str]:
    return {"nats_creds": str(write_creds(new_trust("rogue"), secured.folder / "rogue.creds"))}


def _rogue_ca(secured: Secured) -> dict[str, str]:
    assert secured.pki is not None
    return {"nats_tls_ca": str(secured.pki.rogue_ca)}


def _rogue_client_cert(secured: Secured) -> dict[str, str]:
    assert secured.pki is not None
    pki = secured.pki
    return {"nats_tls_cert": str(pki.rogue_client_cert), "nats_tls_key": str(pki.rogue_client_key)}


WRONG = {
    "wrong-password": Wrong(
        "userpass", lambda s: {"nats_password": "not the password"}, "authorization"
    ),
    "wrong-token": Wrong("token", lambda s: {"nats_token": "not-the-token"}, "authorization"),
    "no-credentials": Wrong("token", lambda s: {"nats_token": ""}, "authorization"),
    "creds-of-an-untrusted-account": Wrong("creds", _rogue_creds, "authorization"),
    "missing-creds-file": Wrong(
        "creds", lambda s: {"nats_creds": str(s.folder / "missing.creds")}, "missing.creds"
    ),
    # The worker does not trust the server's certificate (its CA file is another CA's).
    "server-certificate-from-an-untrusted-ca": Wrong("mtls", _rogue_ca, "certificate"),
    # The server does not trust the worker's client certificate: all the client sees is the
    # connection closing mid-handshake, so the message has to add the hint itself.
    "client-certificate-from-an-untrusted-ca": Wrong("mtls", _rogue_client_cert, "certificate"),
}


@pytest.mark.parametrize("case", list(WRONG))
async def test_wrong_credentials_stop_start_up_with_an_error_naming_the_server_and_the_cause(
    case: str, request: pytest.FixtureRequest
) -> None:
    wrong = WRONG[case]
    secured: Secured = request.getfixturevalue(wrong.server)
    message = await start_up_error(secured, **wrong.settings(secured))
    assert secured.url in message, message
    assert wrong.says.lower() in message.lower(), message


# --- the CLI --------------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**clean, **env},
    )


def env_of(settings: dict[str, str]) -> dict[str, str]:
    return {"MEMORY_WORKER_" + key.upper(): value for key, value in settings.items()}


async def test_cli_check_and_fire_use_the_tls_variables(mtls: Secured) -> None:
    """Given MEMORY_WORKER_NATS_TLS_CA/_CERT/_KEY, `check` answers 0 and `fire` stores over
    mutual TLS; without a client certificate `check` exits 3 naming the server."""
    async with started_worker(mtls):
        done = await asyncio.to_thread(
            cli, "check", "--nats-url", mtls.url, env=env_of(mtls.worker)
        )
        assert done.returncode == 0, done.stderr
        fired = await asyncio.to_thread(
            cli,
            "fire",
            "memory::store",
            '{"agentId": "a1", "content": "over TLS"}',
            env={**env_of(mtls.worker), "MEMORY_WORKER_NATS_URL": mtls.url},
        )
        assert fired.returncode == 0, fired.stderr
        assert json.loads(fired.stdout)["stored"] is True
        no_cert = {"MEMORY_WORKER_NATS_TLS_CA": mtls.worker["nats_tls_ca"]}
        done = await asyncio.to_thread(
            cli, "check", "--nats-url", mtls.url, "--timeout", "2", env=no_cert
        )
        assert done.returncode == 3
        assert mtls.url in done.stderr, done.stderr


async def test_cli_check_uses_the_user_and_password_variables(userpass: Secured) -> None:
    """With MEMORY_WORKER_NATS_USER/_PASSWORD `check` answers 0; with a wrong password it exits
    3 (cannot reach NATS) and passes on the server's reason."""
    good = env_of(userpass.worker)
    async with started_worker(userpass):
        done = await asyncio.to_thread(cli, "check", "--nats-url", userpass.url, env=good)
        assert done.returncode == 0, done.stderr
    bad = {**good, "MEMORY_WORKER_NATS_PASSWORD": "wrong"}
    done = await asyncio.to_thread(cli, "check", "--nats-url", userpass.url, env=bad)
    assert done.returncode == 3
    assert userpass.url in done.stderr and "Authorization Violation" in done.stderr, done.stderr


async def test_cli_reports_refused_credentials_in_one_line_without_a_traceback(
    userpass: Secured,
) -> None:
    bad = env_of({**userpass.worker, "nats_password": "wrong"})
    done = await asyncio.to_thread(cli, "check", "--nats-url", userpass.url, env=bad)
    assert done.returncode == 3
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
