"""Field types and struct bases shared by every trigger's request and reply.

Requests are frozen, keyword-only, camelCase on the wire and refuse unknown keys; `null` is the
wrong type for every key, so optional keys are `UNSET` when omitted rather than `None`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

AgentId = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
SessionId = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
EntityId = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
# Milliseconds since the epoch, up to the end of year 9999.
Millis = Annotated[int, msgspec.Meta(ge=0, le=253_402_300_799_999)]
Role = Literal["user", "assistant", "system"]


class Request(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    pass


class Reply(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass
