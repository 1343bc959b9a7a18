"""`memory-worker ui`: check who may come in, then serve the browser until SIGINT or SIGTERM.

With MEMORY_WORKER_UI_TOKENS a file of section 18's form is read at start (a bad file stops the
start, exit 78 naming the variable); without it, only a loopback --host may be served (any other
is exit 78 naming the variable): whoever reaches the port could see every agent."""

from __future__ import annotations

import argparse
import os
import sys

from worker.commands import Exit, client_url
from worker.config import Config
from worker.mcp_http import LOOPBACK
from worker.tokens import TokenFileError, tokens_from_env
from worker.ui.access import Sessions
from worker.ui.server import TOKENS_VARIABLE, connector, make_app, serve


def ui_command(config: Config, args: argparse.Namespace) -> Exit:
    try:
        tokens = tokens_from_env(TOKENS_VARIABLE, os.environ)
    except TokenFileError as error:
        print(f"memory-worker ui: {error}", file=sys.stderr)
        return Exit.CONFIG
    if tokens is None and args.host not in LOOPBACK:
        print(
            f"memory-worker ui: --host {args.host} is not loopback (127.0.0.1, ::1, localhost): "
            f"serving it needs {TOKENS_VARIABLE} (a file of tokens and the agents each may see; "
            "`memory-worker token` makes one)",
            file=sys.stderr,
        )
        return Exit.CONFIG
    url = client_url(config, args.nats_url)
    link = connector(config, url, args.timeout, args.inbox_prefix)
    link.tenant = args.tenant
    serve(make_app(link, Sessions(tokens)), args.host, args.port)
    return Exit.OK
