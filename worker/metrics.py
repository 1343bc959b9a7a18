"""An optional Prometheus endpoint (MEMORY_WORKER_METRICS_PORT; off by default).

The text exposition format is small enough to write directly, so no client library is added.
The series name tenants, so the endpoint listens on loopback unless MEMORY_WORKER_METRICS_HOST
says otherwise (the deploy files set 0.0.0.0 where a scraper needs it), and a connection gets
HEAD_DEADLINE_S for its whole request head: a client trickling header lines cannot keep it.
Request, in-flight and job figures come from the worker's telemetry (worker/telemetry.py);
database gauges are counted at scrape time on a reader thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog

from handlers.stats import memories_by_tenant, page_bytes, stats_of, table_counts
from handlers.tables.registered import TABLES
from handlers.tables.table import Table
from worker.readers import Reads
from worker.services import wall_clock_ms
from worker.telemetry import LATENCY_BUCKETS, Telemetry

log = structlog.get_logger()
PREFIX = "memory_worker"
HEAD_DEADLINE_S = 5.0  # from accepting the connection to the blank line ending the head
HEAD_MAX_BYTES = 16_384  # a scraper's GET is a few hundred bytes


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def render_metrics(
    telemetry: Telemetry, readers: Reads, tables: Sequence[Table] = TABLES
) -> str:
    lines: list[str] = []

    def family(name: str, kind: str, text: str) -> None:
        lines.append(f"# HELP {PREFIX}_{name} {text}")
        lines.append(f"# TYPE {PREFIX}_{name} {kind}")

    family("requests_total", "counter", "Requests handled, by trigger.")
    for trigger, stats in telemetry.triggers.items():
        lines.append(f'{PREFIX}_requests_total{{trigger="{trigger}"}} {stats.requests}')
    family("errors_total", "counter", "Requests answered with an error, by trigger and code.")
    for trigger, stats in telemetry.triggers.items():
        for code, count in sorted(stats.errors_by_code.items()):
            lines.append(f'{PREFIX}_errors_total{{trigger="{trigger}",code="{code}"}} {count}')
    family("request_duration_seconds", "histogram", "Time to handle a request, by trigger.")
    for trigger, stats in telemetry.triggers.items():
        series = f"{PREFIX}_request_duration_seconds"
        cumulative = 0
        for bound, count in zip(LATENCY_BUCKETS, stats.buckets, strict=True):
            cumulative += count
            lines.append(f'{series}_bucket{{trigger="{trigger}",le="{bound}"}} {cumulative}')
        lines.append(f'{series}_bucket{{trigger="{trigger}",le="+Inf"}} {stats.requests}')
        lines.append(f'{series}_sum{{trigger="{trigger}"}} {stats.total_ms / 1000}')
        lines.append(f'{series}_count{{trigger="{trigger}"}} {stats.requests}')
    if telemetry.by_tenant:
        family("tenant_requests_total", "counter", "Requests by tenant caller and trigger.")
        for tenant, figures in sorted(telemetry.by_tenant.items()):
            for trigger, stats in figures.items():
                labels = f'tenant="{_label(tenant)}",trigger="{trigger}"'
                lines.append(f"{PREFIX}_tenant_requests_total{{{labels}}} {stats.requests}")
        family("tenant_errors_total", "counter", "Errors by tenant caller, trigger and code.")
        for tenant, figures in sorted(telemetry.by_tenant.items()):
            for trigger, stats in figures.items():
                for code, count in sorted(stats.errors_by_code.items()):
                    labels = f'tenant="{_label(tenant)}",trigger="{trigger}",code="{code}"'
                    lines.append(f"{PREFIX}_tenant_errors_total{{{labels}}} {count}")
    now = wall_clock_ms()
    counts = await readers.run(
        lambda conn: {**table_counts(conn, now=now, tables=tables), "bytes": page_bytes(conn)}
    )
    # Each count a table's registration makes a gauge of (handlers/tables/).
    for stat in stats_of(tables):
        if stat.metric is not None:
            family(stat.key, "gauge", stat.metric)
            lines.append(f"{PREFIX}_{stat.key} {counts[stat.key]}")
    family("database_bytes", "gauge", "Size of the database pages in bytes.")
    lines.append(f"{PREFIX}_database_bytes {counts['bytes']}")
    family("tenant_memories", "gauge", "Memories stored, by tenant ('' the default tenant).")
    for tenant, count in sorted((await readers.run(memories_by_tenant)).items()):
        lines.append(f'{PREFIX}_tenant_memories{{tenant="{_label(tenant)}"}} {count}')
    family("redactions_total", "counter", "Secrets and PII the sanitiser replaced, by type.")
    for kind, count in sorted(telemetry.sanitizer.redactions.items()):
        lines.append(f'{PREFIX}_redactions_total{{type="{_label(kind)}"}} {count}')
    family("flagged_total", "counter", "Memories stored or updated with a flag, by flag.")
    for flag, count in sorted(telemetry.sanitizer.flags.items()):
        lines.append(f'{PREFIX}_flagged_total{{flag="{_label(flag)}"}} {count}')
    family("in_flight", "gauge", "Requests being handled now.")
    lines.append(f"{PREFIX}_in_flight {telemetry.in_flight}")
    family("job_last_run_timestamp_seconds", "gauge", "When each scheduled job last ran.")
    family("job_last_success", "gauge", "1 if the job's last run succeeded, else 0.")
    for name, record in telemetry.jobs.items():
        if record.last_fire is not None:
            job = _label(name)
            lines.append(
                f'{PREFIX}_job_last_run_timestamp_seconds{{job="{job}"}} {record.last_fire / 1000}'
            )
            ok = 1 if record.last_outcome == "ok" else 0
            lines.append(f'{PREFIX}_job_last_success{{job="{job}"}} {ok}')
    return "\n".join(lines) + "\n"


class HeadTooLarge(ValueError):
    """The request head is longer than HEAD_MAX_BYTES."""


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line, after reading the rest of the head up to its blank line."""
    request_line = await reader.readline()
    size = len(request_line)
    while line := await reader.readline():
        size += len(line)
        if size > HEAD_MAX_BYTES:
            raise HeadTooLarge(f"request head over {HEAD_MAX_BYTES} bytes")
        if not line.strip():
            break
    return request_line


class MetricsServer:
    def __init__(self, telemetry: Telemetry, readers: Reads, host: str, port: int) -> None:
        self._telemetry = telemetry
        self._readers = readers
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("metrics.listening", host=self._host, port=self.port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(_read_head(reader), HEAD_DEADLINE_S)
            parts = request_line.decode("latin-1").split()
            if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
                body = (await render_metrics(self._telemetry, self._readers)).encode()
                status, kind = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, kind = b"not found: try /metrics\n", "404 Not Found", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except Exception as error:
            log.warning("metrics.request_failed", error=type(error).__name__)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
