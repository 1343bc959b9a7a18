"""structlog set up once at start-up: JSON lines on stderr unless stderr is a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog

from worker.redact import redact_event


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
            structlog.contextvars.merge_contextvars,
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
