"""The canonical row on a plain connection: counted per (tenant, agent, user), the last channel
kept, the summary set apart, 404 for anyone else."""

from __future__ import annotations

import apsw
import pytest

from handlers.canonical import canonical_get, count_message, set_summary
from schema.canonical import CanonicalGetRequest, CanonicalSession
from schema.errors import NotFound
from tests.handlers.support import NOW


def test_messages_are_counted_with_the_last_channel_and_the_summary_is_set_apart(
    conn: apsw.Connection,
) -> None:
    with conn:
        assert count_message(conn, ("", "a"), "u1", "slack", NOW) == 1
        assert count_message(conn, ("", "a"), "u1", "web", NOW + 1) == 2
        set_summary(conn, ("", "a"), "u1", "they talked", NOW + 2)
    got = canonical_get(conn, CanonicalGetRequest(agent_id="a", user_id="u1"), now=0)
    assert got == CanonicalSession(
        summary="they talked", last_channel="web", message_count=2, updated_at=NOW + 2
    )


@pytest.mark.parametrize(
    "asked",
    [
        CanonicalGetRequest(agent_id="a", user_id="u2"),
        CanonicalGetRequest(agent_id="b", user_id="u1"),
        CanonicalGetRequest(agent_id="a", user_id="u1", tenant="TEAM_B"),
    ],
)
def test_another_user_agent_or_tenant_is_not_found(
    conn: apsw.Connection, asked: CanonicalGetRequest
) -> None:
    with conn:
        count_message(conn, ("", "a"), "u1", "slack", NOW)
        count_message(conn, ("TEAM_A", "a"), "u1", "slack", NOW)
    with pytest.raises(NotFound, match=r"\$\.userId"):
        canonical_get(conn, asked, now=0)
