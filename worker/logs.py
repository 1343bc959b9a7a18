"""structlog set up once at start-up: JSON lines on stderr unless stderr is a terminal.

Every line logged while a request runs carries its trigger, source, tenant and agent
(worker/dispatch.py): they are one context variable, REQUEST, set once per request and merged
into each line by `merge_request`, which costs a request a tenth of binding and resetting
structlog's context variables, one per key (issue 33: at thousands of stores a second each
microsecond of the request path counts).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any, Literal, TextIO

import structlog

from worker.redact import redact_event

# The request being served in this context: its trigger, source, tenant and agent.
REQUEST: ContextVar[dict[str, Any] | None] = ContextVar("request_log_context", default=None)


def merge_request(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: the request's keys on the line, unless the line names them."""
    context = REQUEST.get()
    if context is not None:
        for key, value in context.items():
            event_dict.setdefault(key, value)
    return event_dict


def info_enabled() -> bool:
    """Whether an info line would be written under the configuration now: a hot path asks
    before it builds one (a filtered line still costs a bound logger and its arguments)."""
    wrapper: Any = structlog.get_config()["wrapper_class"]
    check = getattr(wrapper, "is_enabled_for", None)  # structlog's filtering loggers have it
    return True if check is None else bool(check(wrapper, logging.INFO))


def configure_logging(
    level: str = "info",
    fmt: Literal["auto", "json", "console"] = "auto",
    file: TextIO | None = None,
) -> None:
    """`file` (default stderr) lets a test read exactly what would be written."""
    out = sys.stderr if file is None else file
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            merge_request,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
