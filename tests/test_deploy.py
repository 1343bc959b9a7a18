"""deploy/: what can be checked here without systemd, Docker or Kubernetes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from nats.errors import Error as NatsError

from tests.conftest import worker_config
from tests.shipped_nats import CONF, PASSWORDS, connect_as, password, shipped_nats
from tests.support import Client, wait_until
from worker.app import App
from worker.config import FIELDS, env_name
from worker.embedded import server_binary

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def deploy_files() -> list[Path]:
    return [path for path in DEPLOY.rglob("*") if path.is_file()]


def test_every_setting_the_deploy_files_use_exists_in_the_configuration() -> None:
    known = {env_name(field) for field in FIELDS}
    used = {
        name
        for path in deploy_files()
        for name in re.findall(r"MEMORY_WORKER_[A-Z_]+", path.read_text(encoding="utf-8"))
    }
    assert used and used <= known, sorted(used - known)


def test_the_example_environment_lists_every_setting() -> None:
    listed = set(re.findall(r"^#?(MEMORY_WORKER_[A-Z_]+)=", (DEPLOY / "memory-worker.env.example")
                            .read_text(encoding="utf-8"), re.M))  # fmt: skip
    assert listed == {env_name(field) for field in FIELDS}


def test_compose_and_kubernetes_files_parse() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    assert set(compose["services"]) == {"nats", "worker"}
    assert compose["services"]["worker"]["build"]["dockerfile"] == "deploy/Containerfile"
    kinds = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            kinds.append(document["kind"])
    assert sorted(kinds) == ["ConfigMap", "Secret", "StatefulSet"]


def test_the_sharded_compose_and_kubernetes_files_parse_and_name_each_shard() -> None:
    """Three NATS nodes of the cluster config and three shards, each with its own name and
    volume; on Kubernetes a shard is named after its pod."""
    compose = yaml.safe_load((DEPLOY / "compose.sharded.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert {f"nats-{n}" for n in (1, 2, 3)} | {f"shard-{n}" for n in (1, 2, 3)} == set(services)
    names = {services[f"shard-{n}"]["environment"]["MEMORY_WORKER_SHARD_NAME"] for n in (1, 2, 3)}
    assert names == {"shard-1", "shard-2", "shard-3"}
    for n in (1, 2, 3):
        env = services[f"shard-{n}"]["environment"]
        assert env["MEMORY_WORKER_MODE"] == "sharded" and env["MEMORY_WORKER_REPLICAS"] == "3"
        assert services[f"nats-{n}"]["environment"] == {"SERVER_NAME": f"nats-{n}"}
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "sharded" / "shards.yaml")
                                        .read_text(encoding="utf-8")))  # fmt: skip
    assert [d["kind"] for d in documents] == ["ConfigMap", "StatefulSet"]
    [container] = documents[1]["spec"]["template"]["spec"]["containers"]
    [name] = [e for e in container["env"] if e["name"] == "MEMORY_WORKER_SHARD_NAME"]
    assert name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_container_file_runs_as_non_root_with_a_health_check() -> None:
    text = (DEPLOY / "Containerfile").read_text(encoding="utf-8")
    assert re.search(r"^USER memory$", text, re.M)
    assert "HEALTHCHECK" in text and '"memory-worker", "check"' in text
    assert "VOLUME /data" in text


def test_systemd_unit_is_hardened_and_lets_the_worker_drain() -> None:
    unit = (DEPLOY / "systemd" / "memory-worker.service").read_text(encoding="utf-8")
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                 "PrivateTmp=yes", "KillMode=mixed", "Restart=on-failure",
                 "StateDirectory=memory-worker"):  # fmt: skip
        assert re.search(rf"^{re.escape(line)}$", unit, re.M), line


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_unit_verifies() -> None:
    done = subprocess.run(
        ["systemd-analyze", "verify", str(DEPLOY / "systemd" / "memory-worker.service")],
        capture_output=True,
        text=True,
    )
    # The one complaint expected here: the worker is not installed in /opt on this machine.
    problems = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and "is not executable: No such file or directory" not in line
    ]
    assert problems == [], done.stderr


def test_nats_config_is_valid() -> None:
    done = subprocess.run(
        [server_binary(), "-c", str(CONF), "-t"],
        capture_output=True,
        text=True,
        env={**os.environ, **PASSWORDS},
    )
    assert done.returncode == 0, done.stderr


def test_the_shipped_nats_config_is_what_nats_config_prints() -> None:
    """deploy/nats/nats-server.conf is `memory-worker nats-config`'s output, its header
    included: a new trigger reaches tenants by running the command again, and a hand edit of the
    file fails here."""
    done = subprocess.run(
        [sys.executable, "-m", "worker", "nats-config"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == CONF.read_text(encoding="utf-8")


def test_nats_config_for_tenants_of_ones_own_is_valid_and_refuses_a_name_twice(
    tmp_path: Path,
) -> None:
    """`--tenant TEAM_C=dave,erin` makes that account with those users (each its inbox and
    password variable) importing every trigger, which nats-server accepts; a user named twice,
    or the worker's own account, is a usage error naming it."""
    worker = [sys.executable, "-m", "worker", "nats-config"]
    done = subprocess.run([*worker, "--tenant", "TEAM_C=dave,erin"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "TEAM_A" not in done.stdout and '"_INBOX_erin.>"' in done.stdout
    assert 'subject: "memory.ingest.TEAM_C.>" }, to: "memory.ingest.>"' in done.stdout
    conf = tmp_path / "nats.conf"
    conf.write_text(done.stdout, encoding="utf-8")
    variables = {"WORKER_PASSWORD": "w", "OPERATOR_PASSWORD": "o", "DAVE_PASSWORD": "d"}
    checked = subprocess.run(
        [server_binary(), "-c", str(conf), "-t"],
        capture_output=True,
        text=True,
        env={**os.environ, **variables, "ERIN_PASSWORD": "e"},
    )
    assert checked.returncode == 0, checked.stderr
    for tenants in (["T=dave", "U=Dave"], ["MEMORY=dave"]):
        flags = [flag for tenant in tenants for flag in ("--tenant", tenant)]
        refused = subprocess.run([*worker, *flags], capture_output=True, text=True)
        assert refused.returncode == 64 and refused.stdout == "", refused
        assert ("DAVE" if "T=dave" in tenants else "MEMORY") in refused.stderr


async def test_only_the_worker_account_may_serve_memory_subjects(tmp_path: Path) -> None:
    async with shipped_nats(tmp_path) as url:
        worker = await connect_as(url, "worker")
        errors: list[str] = []
        client = await connect_as(url, "alice", errors)

        async def answer(msg: Any) -> None:
            await msg.respond(b"from the worker")

        await worker.subscribe("memory.store", queue="memory-worker", cb=answer)
        await worker.flush()  # the worker's SUB reaches the server before alice's request
        impostor = await client.subscribe("memory.store")
        await client.flush()
        await wait_until(  # the server's -ERR arrives after the flush
            lambda: any("permissions violation" in e for e in errors),
            "the server refused alice's subscription to memory.store",
        )
        reply = await client.request("memory.store", b"{}", timeout=2)
        assert reply.data == b"from the worker"
        with pytest.raises((NatsError, TimeoutError)):
            await impostor.next_msg(timeout=0.3)
        await worker.close()
        # The real worker, ingest stream included, runs within the worker user's permissions.
        app = App(
            worker_config(
                url, tmp_path / "memory.db", nats_user="worker", nats_password=password("worker")
            )
        )
        await app.start()
        try:
            assert app.ingest is not None
            stored = await Client(client).call("memory::store", {"agentId": "a", "content": "x"})
            assert stored.ok, stored
        finally:
            await app.stop()
        await client.close()


def test_the_shipped_nats_config_exports_and_imports_every_trigger() -> None:
    """A new trigger is reachable from tenants only once the config exports it, each tenant
    imports it with share (so that the worker learns the caller) and its users may publish it."""
    from worker.registry import ROUTES

    text = CONF.read_text(encoding="utf-8")
    exported = set(re.findall(r'\{ service: "([^"]+)" \}', text))
    imports = re.findall(r'\{ service: \{ account: MEMORY, subject: "([^"]+)" \}, share: true \}',
                         text)  # fmt: skip
    publish = re.search(r"TENANT_PUBLISH: \{(.*?)\}", text, re.S)
    assert publish is not None
    for route in ROUTES:
        subject = route.subject()
        assert subject in exported, subject
        assert imports.count(subject) == 2, subject  # TEAM_A and TEAM_B
        assert f'"{subject}"' in publish.group(1), subject
