"""The worker's one configuration struct: flags, then MEMORY_WORKER_* variables, then defaults.

A bad value stops start-up with a message naming the variable, rather than failing later on the
first request that needs it.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
from croniter import croniter

from handlers.recall.vector_index import VectorIndexSetting
from worker.event_loop import EventLoop
from worker.redact import redact

ENV_PREFIX = "MEMORY_WORKER_"
Positive = Annotated[float, msgspec.Meta(gt=0)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    nats_url: str = ""
    db_path: str = "./data/memory.db"
    subject_prefix: str = ""
    embedder: Literal["builtin", "bus", "none"] = "builtin"
    builtin_model: Literal["minilm", "e5", "hash"] = "minilm"
    embed_timeout: Positive = 5.0
    max_content_bytes: Annotated[int, msgspec.Meta(ge=1, le=8 * 1024 * 1024)] = 524_288
    max_query_bytes: Annotated[int, msgspec.Meta(ge=1, le=8 * 1024 * 1024)] = 16_384
    max_in_flight: Annotated[int, msgspec.Meta(ge=1)] = 1024
    # Fair turns (worker/turns.py): requests executing at once in all and per tenant (per agent
    # with tenancy off); a tenant's requests past that wait, up to tenant_queue, then 503.
    max_executing: Annotated[int, msgspec.Meta(ge=1)] = 256
    tenant_in_flight: Annotated[int, msgspec.Meta(ge=1)] = 64
    tenant_queue: Annotated[int, msgspec.Meta(ge=0)] = 512
    # How much of each second recalls may hold stores, the writer and stored texts' model lanes
    # back (worker/recalls_first.py); 0: never.
    recalls_first_ms: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 250
    synchronous: Literal["full", "normal"] = "full"
    # The event loop's thread and the writer's kept on one CPU (worker/affinity.py).
    pin_threads: bool = True
    # What runs `memory-worker run`'s event loop (worker/event_loop.py).
    event_loop: EventLoop = "uvloop"
    ingest: bool = True
    keyword: Literal["share", "idf", "stems"] = "stems"
    # `extract`: memory::store asserts the first-person facts its text states (section 19);
    # `off`: facts come only from memory::fact::assert.
    facts: Literal["extract", "off"] = "extract"
    # `assign`: a message stored in a session joins a topic (section 21); `off`: it joins none
    # (what the topic step costs, measured by `bench --topic-cost`).
    topics: Literal["assign", "off"] = "assign"
    # `llm`: a topic's title, labels and summary are asked of llm.complete in the background
    # (worker/topic_titles.py), the built-in text kept when it does not answer; `builtin`: never.
    topic_titles: Literal["llm", "builtin"] = "llm"
    # `formula`: recall is the exact top-k of the score; `expanded`: that ranking, with a memory
    # lifted by its stronger neighbours in the conversation (handlers/recall/expand.py).
    recall: Literal["formula", "expanded"] = "expanded"
    metrics_port: Port = 0
    # Loopback: the series name tenants; the deploy files set 0.0.0.0 where a scraper needs it.
    metrics_host: str = "127.0.0.1"
    index_memory_mb: Annotated[int, msgspec.Meta(ge=16)] = 1024
    # The recall index keeps each agent's columns beside the database (`<file>.index/`), a
    # cache that opens memory-mapped at the next start (worker/recall_index/persist.py).
    index_persist: bool = True
    # Recall with a query vector: `exact` reads every vector; `codes` ranks a shortlist picked
    # with 1-bit sign codes (approximate, handlers/recall/codes.py); `approximate` is `exact`
    # below 50 000 vectors in the agent and `codes` from there; `auto` is `approximate` in the
    # expanded recall mode and `exact` in `formula` (handlers/recall/vector_index.py `chosen`).
    vector_index: VectorIndexSetting = "auto"
    vector_candidates: Annotated[int, msgspec.Meta(ge=10, le=100_000)] = 1000
    consolidate_cron: str = "0 */6 * * *"
    evict_cron: str = "0 3 * * *"
    # Scheduled consolidations merge near-duplicates at this cosine (memory::consolidate's
    # `mergeThreshold`); 0 is off, as the contract's consolidation has it.
    merge_threshold: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    cron_tz: str = "UTC"
    llm_provider: str = "anthropic"
    llm_model: str = "claude-haiku-4-5"
    llm_max_tokens: Annotated[int, msgspec.Meta(ge=1)] = 1024
    llm_timeout: Positive = 30.0
    embedded_port: Port = 4222
    nats_user: str = ""
    nats_password: str = ""
    nats_token: str = ""
    nats_creds: str = ""
    nats_tls_ca: str = ""
    nats_tls_cert: str = ""
    nats_tls_key: str = ""
    # Seconds the worker keeps trying to reach NATS, at start or after losing it, before it
    # exits non-zero for its supervisor to restart it (worker/reachability.py).
    nats_reconnect_budget: Positive = 120.0
    # Days an audit row is kept; eviction removes older ones.
    audit_retention: Annotated[int, msgspec.Meta(ge=1, le=36500)] = 90
    tenancy: Literal["none", "account"] = "none"
    # The NATS account the worker runs in: a request stamped with it is administrative.
    account: str = "MEMORY"
    grants: str = ""
    # What store and update do with secrets, PII and injection markers in content (section 13).
    sanitize: Literal["redact", "flag", "off"] = "redact"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    # Shards on a NATS cluster (section 16, README "More than one machine"); `single` is one
    # SQLite file, as always.
    mode: Literal["single", "sharded"] = "single"
    # Fixed for the cluster's life: agents are hashed into this many partitions.
    partitions: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 64
    shard_name: str = ""  # unique per shard; the host name when empty
    data_dir: str = "./data/shards"  # one SQLite file per partition this shard holds
    lease_ttl: Annotated[float, msgspec.Meta(ge=1.0, le=300.0)] = 10.0
    standbys: Annotated[int, msgspec.Meta(ge=0, le=4)] = 1
    snapshot_interval: Annotated[int, msgspec.Meta(ge=10)] = 300
    # Replicas of each partition's log stream, the lease bucket and the snapshots.
    replicas: Literal[1, 3, 5] = 3


FIELDS = frozenset(Config.__struct_fields__)


class ConfigError(ValueError):
    """A configuration value is unusable; the message names the variable."""


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load_config(env: Mapping[str, str], **flags: Any) -> Config:
    """Build the config from an environment mapping and flag values (None means not given)."""
    raw: dict[str, Any] = {}
    for field in FIELDS:
        if env_name(field) in env:
            raw[field] = env[env_name(field)]
    raw.update({key: value for key, value in flags.items() if value is not None})
    try:
        config = msgspec.convert(raw, Config, strict=False)
    except msgspec.ValidationError as error:
        raise ConfigError(_name_variable(str(error))) from None
    _check_semantics(config)
    return config


def _name_variable(message: str) -> str:
    for field in sorted(FIELDS, key=len, reverse=True):
        marker = f"`$.{field}`"
        if marker in message:
            return f"{env_name(field)}: {message.replace(' - at ' + marker, '')}"
    return message


def nats_url_problem(url: str) -> str | None:
    """Why url is not one NATS server address, or None if it is.

    nats-py quietly reads `nats://host:` (an empty port) and `host` as port 4222, so a typo
    would reach whatever listens there, or hang on nothing. The URL is quoted with its
    password or token masked."""
    shown = repr(redact(url))
    scheme, _, authority = url.partition("://")
    secret, at, host = authority.rpartition("@")
    if at and any(mark in secret for mark in "/?#"):  # shown whole, as no parser reads it
        return (
            f"'{scheme}://***@{host}' has `/`, `?` or `#` in its password or token, which a NATS "
            "URL cannot carry; set MEMORY_WORKER_NATS_USER and _PASSWORD (or _TOKEN) instead"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"{shown} has a port that is not a number from 0 to 65535"
    if url != url.strip():
        return f"{shown} has spaces around it"
    if url.partition("://")[0] not in ("nats", "tls", "ws", "wss"):  # nats-py reads lower case
        return f"{shown} is not a NATS URL: it starts with nats://, tls://, ws:// or wss://"
    if not parts.hostname:
        return f"{shown} names no host"
    if port == 0:
        return f"{shown} has port 0, which no server listens on"
    if port is None and parts.netloc.endswith(":"):
        return f"{shown} has an empty port; write e.g. nats://{parts.hostname}:4222"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"{shown} has a path or query; a NATS URL is scheme://[user:password@]host[:port]"
    return None


def nats_servers(setting: str) -> list[str]:
    """The servers a NATS URL setting names, in its order: one URL, or a comma-separated list of
    a cluster's. The one reader of MEMORY_WORKER_NATS_URL, `--nats-url` and the URL given to
    MemoryClient.connect. Each is checked as one URL (nats_url_problem); ValueError says which
    of the list is not a NATS server's address, and why."""
    servers = [part.strip() for part in setting.split(",")] if "," in setting else [setting]
    for number, url in enumerate(servers, 1):
        if problem := nats_url_problem(url):
            raise ValueError(
                f"server {number} of {len(servers)}: {problem}" if len(servers) > 1 else problem
            )
    return servers


def nats_setting_problem(setting: str) -> str | None:
    """Why setting does not name NATS servers (nats_servers), or None if it does."""
    try:
        nats_servers(setting)
    except ValueError as error:
        return str(error)
    return None


def _check_semantics(config: Config) -> None:
    if config.nats_url and (problem := nats_setting_problem(config.nats_url)):
        raise ConfigError(f"{env_name('nats_url')}: {problem}")
    if config.mode == "sharded":
        _check_sharded(config)
    for field in ("consolidate_cron", "evict_cron"):
        expression = getattr(config, field)
        if expression and not croniter.is_valid(expression):
            raise ConfigError(f"{env_name(field)}: not a valid cron expression: {expression!r}")
    try:
        zoneinfo.ZoneInfo(config.cron_tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{env_name('cron_tz')}: unknown time zone {config.cron_tz!r}") from None
    if config.subject_prefix and not config.subject_prefix.endswith("."):
        raise ConfigError(f"{env_name('subject_prefix')}: must end with '.', e.g. 'prod.'")
    if bool(config.nats_tls_cert) != bool(config.nats_tls_key):
        raise ConfigError(f"{env_name('nats_tls_cert')} and {env_name('nats_tls_key')} go together")
    if config.nats_user and not config.nats_password:
        raise ConfigError(f"{env_name('nats_password')}: required with {env_name('nats_user')}")
    if config.grants and config.tenancy != "account":
        raise ConfigError(f"{env_name('grants')}: needs {env_name('tenancy')}=account")
    grant_patterns(config)


SHARD_NAME = r"\A[A-Za-z0-9_-]{1,64}\Z"


def _check_sharded(config: Config) -> None:
    """Sharded mode runs against a NATS cluster, never the embedded single server."""
    if not config.nats_url:
        raise ConfigError(
            f"{env_name('nats_url')}: sharded mode needs the NATS cluster's servers "
            "(comma-separated); the embedded server is for single mode"
        )
    if config.shard_name and not re.match(SHARD_NAME, config.shard_name):
        raise ConfigError(
            f"{env_name('shard_name')}: {config.shard_name!r} is not 1-64 letters, digits, "
            "`-` or `_`"
        )
    if config.subject_prefix:
        raise ConfigError(f"{env_name('subject_prefix')}: not supported in sharded mode yet")


def grant_patterns(config: Config) -> dict[str, list[str]]:
    """MEMORY_WORKER_GRANTS read and checked: `{"account/user": ["agent-pattern", ...]}`."""
    if not config.grants:
        return {}
    name = env_name("grants")
    try:
        raw = Path(config.grants).read_bytes()
    except OSError as error:
        raise ConfigError(f"{name}: cannot read {config.grants}: {error.strerror}") from None
    try:
        patterns = msgspec.json.decode(raw, type=dict[str, list[str]])
    except msgspec.DecodeError as error:
        raise ConfigError(
            f'{name}: {config.grants} is not a JSON object of "account/user": '
            f'["agent-pattern", ...]: {error}'
        ) from None
    for key in patterns:
        account, slash, user = key.partition("/")
        if not (account and slash and user):
            raise ConfigError(f"{name}: {key!r} is not `account/user` or `account/*`")
    return patterns
