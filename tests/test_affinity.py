"""The event loop's thread and the writer's share one CPU; every other thread of the worker, and
the embedded nats-server it starts, may use every CPU (worker/affinity.py). Linux only, and only
where the process may use two CPUs or more."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.support import Client, wait_until
from worker.affinity import EVERY_CPU, every_cpu, pin_to_one_cpu

pytestmark = pytest.mark.skipif(
    len(EVERY_CPU) < 2 or not hasattr(os, "sched_setaffinity"), reason="one CPU, or not Linux"
)


def test_a_thread_pinned_to_one_cpu_starts_threads_that_take_every_cpu_back() -> None:
    seen: dict[str, Any] = {}

    def child() -> None:
        seen["child before"] = os.sched_getaffinity(0)
        every_cpu()
        seen["child after"] = os.sched_getaffinity(0)

    def pinned() -> None:
        seen["cpu"] = pin_to_one_cpu()
        seen["pinned"] = os.sched_getaffinity(0)
        started = threading.Thread(target=child)
        started.start()
        started.join()

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()
    assert seen["cpu"] in EVERY_CPU and seen["pinned"] == {seen["cpu"]}
    assert seen["child before"] == {seen["cpu"]}  # inherited: hence every_cpu at a start
    assert seen["child after"] == EVERY_CPU
    assert os.sched_getaffinity(0) == EVERY_CPU  # this thread was never pinned


def allowed(pid: int) -> dict[int, set[int]]:
    """Each thread of a process: the CPUs it may run on."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        listed = status.split("Cpus_allowed_list:")[1].split()[0]
        cpus: set[int] = set()
        for part in listed.split(","):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
        found[int(tid)] = cpus
    return found


def children(pid: int) -> list[int]:
    return [int(each) for each in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.parametrize(("pin", "embedder"), [("true", "builtin"), ("false", "none")])
async def test_a_running_worker_keeps_its_loop_and_writer_on_one_cpu_and_the_rest_on_any(
    tmp_path: Path, pin: str, embedder: str
) -> None:
    """With the builtin model, whose runtime starts threads of its own while the worker starts
    (they keep every CPU too)."""
    from tests.test_cli import free_port

    port = free_port()
    env = {
        **os.environ,
        "MEMORY_WORKER_EMBEDDED_PORT": str(port),
        "MEMORY_WORKER_DB_PATH": str(tmp_path / "memory.db"),
        "MEMORY_WORKER_EMBEDDER": embedder,
        "MEMORY_WORKER_PIN_THREADS": pin,
    }
    env.pop("MEMORY_WORKER_NATS_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "worker", "run"], env=env)
    try:

        async def serving() -> Any:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) != 0:
                    return None  # not listening yet
            try:
                nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
                await nc.request("$SRV.PING.memory", b"", timeout=0.5)
            except (OSError, nats.errors.Error, TimeoutError):
                return None
            return nc

        nc = await wait_until(serving, "the worker serving", timeout=30)
        client = Client(nc)
        assert (await client.store("a", "a memory"))["stored"] is True
        assert len(await client.recall("a", "memory")) == 1  # the readers started
        await nc.close()
        threads = allowed(process.pid)
        [server] = children(process.pid)
        assert all(cpus == set(EVERY_CPU) for cpus in allowed(server).values())
        if pin == "false":
            assert all(cpus == set(EVERY_CPU) for cpus in threads.values())
            return
        [cpu] = threads[process.pid]  # the event loop's thread: one CPU
        pinned = [tid for tid, cpus in threads.items() if cpus == {cpu}]
        assert len(pinned) == 2, "the loop's thread and the writer's"
        others = [cpus for tid, cpus in threads.items() if tid not in pinned]
        assert len(others) >= 3 and all(cpus == set(EVERY_CPU) for cpus in others)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
