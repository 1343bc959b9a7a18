"""A success reply means the write is on disk: kill -9 the worker mid-load and count."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import nats
import nats.errors

from tests.conftest import worker_config
from tests.support import Client, wait_for_service, wait_until
from worker.app import App

STORES = 4000
IN_FLIGHT = 64


async def test_every_acknowledged_store_survives_kill_9(nats_url: str, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    env = {
        **os.environ,
        "MEMORY_WORKER_NATS_URL": nats_url,
        "MEMORY_WORKER_DB_PATH": str(db),
        "MEMORY_WORKER_EMBEDDER": "none",
        "MEMORY_WORKER_LOG_LEVEL": "warning",
    }
    process = subprocess.Popen([sys.executable, "-m", "worker", "run"], env=env)
    nc = await nats.connect(nats_url)
    client = Client(nc)
    acknowledged: dict[str, str] = {}
    try:
        await wait_for_service(nc)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(STORES):
            queue.put_nowait(index)

        async def sender() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                content = f"durable memory number {index}"
                try:
                    reply = await client.call(
                        "memory::store", {"agentId": f"agent{index % 4}", "content": content}, 2.0
                    )
                except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                    continue  # the worker was killed: not acknowledged
                if reply.ok:
                    acknowledged[content] = reply.body["id"]
                if len(acknowledged) >= STORES // 3 and process.poll() is None:
                    process.send_signal(signal.SIGKILL)

        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert STORES // 3 <= len(acknowledged) < STORES, "the kill did not land mid-load"

    conn = apsw.Connection(str(db))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    on_disk = {str(row[0]): row[1] for row in conn.execute("SELECT content, id FROM memories")}
    conn.close()
    lost = {
        content for content, memory_id in acknowledged.items() if on_disk.get(content) != memory_id
    }
    print(f"\ncrash test: {len(acknowledged)} stores acknowledged, {len(lost)} lost, "
          f"{len(on_disk)} on disk")  # fmt: skip
    assert lost == set()

    app = App(worker_config(nats_url, db))
    await app.start()
    try:
        for content in list(acknowledged)[:200]:
            agent = f"agent{int(content.rsplit(' ', 1)[1]) % 4}"
            again = await client.store(agent, content)
            assert again == {
                "id": acknowledged[content],
                "stored": False,
                "deduplicated": True,
                "redactions": {},
                "flags": [],
                "facts": [],
            }
    finally:
        await app.stop()
        await nc.close()


async def test_a_restart_after_kill_9_replaces_the_orphaned_embedded_server(
    tmp_path: Path,
) -> None:
    from tests.test_cli import free_port

    port = free_port()
    env = {
        **os.environ,
        "MEMORY_WORKER_EMBEDDED_PORT": str(port),
        "MEMORY_WORKER_DB_PATH": str(tmp_path / "memory.db"),
        "MEMORY_WORKER_EMBEDDER": "none",
    }
    env.pop("MEMORY_WORKER_NATS_URL", None)
    url = f"nats://127.0.0.1:{port}"

    async def worker_serving() -> Any:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return None  # not listening yet (nats-py would retry in 2 s itself)
        try:
            nc = await nats.connect(url, allow_reconnect=False, connect_timeout=0.5)
        except (OSError, nats.errors.Error, TimeoutError):
            return None  # no server listening yet
        try:  # the killed worker's orphaned server answers until the new worker stops it
            await nc.request("$SRV.PING.memory", b"", timeout=0.5)
        except nats.errors.Error:  # closed under us, no responder or no answer yet
            await nc.close()
            return None
        return nc

    for round_number in range(2):
        process = subprocess.Popen(
            [sys.executable, "-m", "worker", "run"], env=env, stderr=subprocess.DEVNULL
        )
        try:
            nc = await wait_until(worker_serving, f"round {round_number}: a worker serving")
            reply = await Client(nc).store("a", f"round {round_number}")
            assert reply["stored"] is True
            await nc.close()
            process.send_signal(signal.SIGKILL if round_number == 0 else signal.SIGTERM)
            process.wait(timeout=15)
        finally:
            if process.poll() is None:  # the round failed: stop the worker, and its server
                process.terminate()
                process.wait(timeout=15)
    assert process.returncode == 0
