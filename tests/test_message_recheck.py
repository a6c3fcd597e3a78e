"""One shared re-check for every waiting recv (issue 34): an answer whose notification
was lost still reaches its run, found by one query for all waiters, not a timer each."""

from __future__ import annotations

import asyncio

from helpers import sql

from helix_dbos import tool
from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.waits.message_recheck import WAITER_RECHECK_SECONDS, MessageRecheck


async def test_an_answer_whose_notification_was_lost_is_found_by_the_shared_recheck(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "d1", "name": "delete_file", "arguments": {"path": "/x"}}],
        },
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    # This test's own re-check, swept by hand: the process's thread stands aside.
    process_recheck = helix._process._recheck
    process_recheck.stop()
    own = MessageRecheck(interval_seconds=3600)
    own.start()
    try:
        assert dbos_internals.waiter_recheck_seconds() == 60  # DBOS's per-waiter timer
        handle = await helix.execute(agent, "delete /x")
        for _ in range(400):
            pending = await helix.pending_tool_calls(handle.session_id)
            if pending:
                break
            await asyncio.sleep(0.05)
        assert [p.tool_call_id for p in pending] == ["d1"]
        # The answer is stored, but its notification never fires (a listener cut off).
        sql(
            database_url,
            "ALTER TABLE dbos.notifications DISABLE TRIGGER dbos_notifications_trigger",
        )
        try:
            await helix.approve(handle.session_id, "d1")
            woken = await asyncio.to_thread(own.sweep)
        finally:
            sql(
                database_url,
                "ALTER TABLE dbos.notifications ENABLE TRIGGER dbos_notifications_trigger",
            )
        assert woken == 1, "the sweep found the one waiter whose message is stored"
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.status == "completed" and ran == ["/x"]
        # A second sweep finds nothing: the message was consumed, nobody else waits on one.
        assert await asyncio.to_thread(own.sweep) == 0
    finally:
        own.stop()
        process_recheck.start()


def test_each_waiter_s_own_timer_is_pushed_back_while_the_shared_recheck_runs(helix):
    """Waits that start while the process's re-check runs time out on their own only
    after a day; stopped, DBOS's own minute is back."""
    instance = dbos_internals._dbos_module._dbos_global_instance
    sys_db = instance._sys_db
    assert sys_db._event_recheck_interval() == WAITER_RECHECK_SECONDS
    recheck = helix._process._recheck
    recheck.stop()
    try:
        assert sys_db._event_recheck_interval() == 60
    finally:
        recheck.start()
    assert sys_db._event_recheck_interval() == WAITER_RECHECK_SECONDS
