"""Remote sub-agents (issue 32) between two real helix servers: two uvicorn processes,
each with its own DBOS executor and its own database. The parent's `lead` delegates to
the child's `worker` through `remote_sub_agent_tool`; the tests drive the parent with
`HelixClient`, read both databases with SQL, and SIGKILL either process mid-delegation."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import forkserver
import pytest
from conftest import _new_database
from docs_text import code_blocks, section
from helpers import lines, sql, wait_for
from live_server import ServerProcess

from helix_dbos import HelixClient
from helix_dbos.runtime.children.remote_children import remote_session_id
from helix_dbos.store.database import database_name, with_database

APP = Path(__file__).parent / "apps" / "remote_app.py"
TOKEN = "remote-secret"


class Server(ServerProcess):
    """One helix server process; `start()` again after `kill()` relaunches it as it was."""

    def __init__(self, role: str, database_url: str, markers: Path, child_url: str = "") -> None:
        super().__init__(markers / f"{role}.out")
        self.role, self.database_url, self.markers = role, database_url, markers
        self.executor = f"remote-{role}-{uuid.uuid4().hex[:8]}"
        self.child_url = child_url

    def start(self) -> Server:
        args = [sys.executable, str(APP), self.role, self.database_url, str(self.port)]
        args += [self.executor, str(self.markers)] + ([self.child_url] if self.child_url else [])
        with HelixClient(self.url, token=TOKEN, max_retries=0, timeout=2) as client:
            self.launch(args, lambda: client.workspaces() is not None)
        return self


@contextmanager
def two_servers(parent_db: str, child_db: str, markers: Path) -> Iterator[tuple[Server, Server]]:
    child = Server("child", child_db, markers)
    parent = Server("parent", parent_db, markers, child_url=child.url)
    try:
        child.start()
        parent.start()
        yield parent, child
    finally:
        parent.stop()
        child.stop()


@pytest.fixture
def child_database_url(embedded_dir, migrated_template) -> Iterator[str]:
    with _new_database(embedded_dir, migrated_template) as url:
        yield url


def release(markers: Path, topic: str) -> None:
    (markers / f"release_{topic}").touch()


def marked(markers: Path, name: str) -> bool:
    """Whether the app wrote its mark: a line, not only the file, which `open(..., "a")`
    creates before the write (a SIGKILL between the two leaves it empty)."""
    return bool(lines(markers, name))


def slow_steps_recorded(database_url: str) -> int:
    """DBOS's records of the child's `slow` tool steps."""
    [(count,)] = sql(
        database_url,
        "SELECT count(*) FROM dbos.operation_outputs WHERE function_name = %s",
        "helix.tool:slow",
    )
    return int(count)


def remote_row(database_url: str, parent_session: str) -> tuple:
    [row] = sql(
        database_url,
        "SELECT url, agent_name, remote_session_id, remote_run_id, status, error, "
        "input_tokens, output_tokens, last_seq FROM helix.remote_children "
        "WHERE parent_session_id = %s",
        parent_session,
    )
    return row


def child_runs(database_url: str, session_id: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT run_id, status, output FROM helix.runs WHERE session_id = %s",
        session_id,
    )


pytestmark = pytest.mark.crash


def test_delegation_streams_through_and_rolls_up_usage(database_url, child_database_url, tmp_path):
    with (
        two_servers(database_url, child_database_url, tmp_path) as (parent, child),
        HelixClient(parent.url, token=TOKEN) as client,
    ):
        run = client.start("lead", "fast-owls")
        chunks = list(client.stream(run.session_id, run_id=run.run_id))
        final = client.wait(run.session_id, run.run_id)
        usage = client.get_usage(run.session_id)
        # Two calls in one step run at once: both children are in their tool together.
        fanout = client.start("lead_fanout", "moles")
        wait_for(lambda: all(marked(tmp_path, f"slow_moles-{i}.log") for i in (1, 2)))
        release(tmp_path, "moles-1")
        release(tmp_path, "moles-2")
        both = client.wait(fanout.session_id, fanout.run_id)
    assert both.output == "lead got: moles-1: read about moles-1 | moles-2: read about moles-2"
    assert (final.status, final.output) == (
        "completed",
        "lead got: fast-owls: read about fast-owls",
    )
    child_session = remote_session_id(run.session_id, "r1")
    url, agent, rsid, rrid, status, error, inp, outp, last_seq = remote_row(
        database_url, run.session_id
    )
    assert (url, agent, rsid, status, error) == (
        child.url,
        "worker",
        child_session,
        "completed",
        None,
    )
    [(child_run, child_status, child_output)] = child_runs(child_database_url, child_session)
    assert (rrid, child_status, child_output) == (
        child_run,
        "completed",
        "fast-owls: read about fast-owls",
    )
    # The child's chunks came through the parent's stream, named by the child's session.
    proxied = [c for c in chunks if c.session_id == child_session]
    assert {c.type for c in proxied} >= {"run_started", "tool_end", "run_completed"}
    assert all(c.via_run_id == run.run_id and c.run_id == child_run for c in proxied)
    assert chunks[-1].type == "run_completed" and chunks[-1].run_id == run.run_id
    # The parent's own tool_start for the call comes first, once.
    starts = [
        i for i, c in enumerate(chunks) if c.type == "tool_start" and c.session_id == run.session_id
    ]
    assert len(starts) == 1 and chunks[starts[0]].payload["tool_call_id"] == "r1"
    assert starts[0] < chunks.index(proxied[0])
    # Every chunk of the child's session came through, once; the row says how far.
    [(remote_chunks, remote_last)] = sql(
        child_database_url,
        "SELECT count(*), max(seq) FROM helix.stream_events WHERE session_id = %s",
        child_session,
    )
    assert len(proxied) == remote_chunks and last_seq == remote_last
    # Its usage rolled up as a `subagent` row with the child's tokens.
    [(child_in, child_out)] = sql(
        child_database_url,
        "SELECT sum(input_tokens), sum(output_tokens) FROM helix.usage "
        "WHERE session_id = %s AND kind = 'llm'",
        child_session,
    )
    rows = sql(
        database_url,
        "SELECT tool_name, input_tokens, output_tokens, success FROM helix.usage "
        "WHERE run_id = %s AND kind = 'subagent'",
        run.run_id,
    )
    assert child_in >= 7 and child_out >= 3
    assert rows == [("subagent__worker", child_in, child_out, True)]
    assert (inp, outp) == (child_in, child_out)
    assert usage.totals.subagent_calls == 1
    # The page's SQL, as pasted, finds the call.
    [query] = code_blocks(section("Remote sub-agents"), "sql")
    [found] = sql(database_url, query.replace("'ses_…'", "%s"), run.session_id)
    assert found == ("r1", child.url, "worker", child_session, "completed", child_in)


def test_kill_the_parent_mid_delegation_reattaches(database_url, child_database_url, tmp_path):
    with (
        two_servers(database_url, child_database_url, tmp_path) as (parent, child),
        HelixClient(parent.url, token=TOKEN) as client,
    ):
        run = client.start("lead", "owls")
        wait_for(lambda: marked(tmp_path, "slow_owls.log"))
        parent.kill()
        release(tmp_path, "owls")  # the child finishes while its parent is down
        child_session = remote_session_id(run.session_id, "r1")
        wait_for(lambda: child_runs(child_database_url, child_session)[0][1] == "completed")
        parent.start()
        with HelixClient(parent.url, token=TOKEN) as client:
            final = client.wait(run.session_id, run.run_id)
    assert (final.status, final.output) == ("completed", "lead got: owls: read about owls")
    # One child session, one run, one start key: the recovered parent attached, not restarted.
    assert len(child_runs(child_database_url, child_session)) == 1
    assert sql(child_database_url, "SELECT count(*) FROM helix.start_keys")[0][0] == 1
    assert lines(tmp_path, "slow_owls.log") == ["x"]
    assert len(lines(tmp_path, "llm_worker.log")) == 2
    assert len(lines(tmp_path, "llm_lead.log")) == 2
    assert remote_row(database_url, run.session_id)[4] == "completed"
    assert sql(
        database_url,
        "SELECT count(*) FROM helix.usage WHERE run_id = %s AND kind = 'subagent'",
        run.run_id,
    ) == [(1,)]


def run_status(database_url: str, run_id: str) -> str:
    [(status,)] = sql(database_url, "SELECT status FROM helix.runs WHERE run_id = %s", run_id)
    return str(status)


def child_tokens(child_database_url: str, child_session: str) -> int:
    [(total,)] = sql(
        child_database_url,
        "SELECT sum(input_tokens + output_tokens) FROM helix.usage "
        "WHERE session_id = %s AND kind = 'llm'",
        child_session,
    )
    return int(total)


def test_a_remote_childs_tokens_count_toward_the_parents_usage_limit(
    database_url, child_database_url, tmp_path
):
    """`lead_limited` may use 5 tokens and spends 2 itself: only its remote child's
    tokens, read from its server when it ended, can stop it, at its next model call,
    also when the parent was SIGKILLed while the child ran and recovered after it ended."""
    with (
        two_servers(database_url, child_database_url, tmp_path) as (parent, child),
        HelixClient(parent.url, token=TOKEN) as client,
    ):
        fast = client.start("lead_limited", "fast-spend")
        wait_for(lambda: run_status(database_url, fast.run_id) == "failed")
        run = client.start("lead_limited", "spend")
        wait_for(lambda: marked(tmp_path, "slow_spend.log"))
        parent.kill()
        release(tmp_path, "spend")  # the child spends while its parent is down
        child_session = remote_session_id(run.session_id, "r1")
        wait_for(lambda: child_runs(child_database_url, child_session)[0][1] == "completed")
        parent.start()
        wait_for(lambda: run_status(database_url, run.run_id) == "failed")
    for each, session in ((fast, remote_session_id(fast.session_id, "r1")), (run, child_session)):
        spent = child_tokens(child_database_url, session)
        assert spent >= 10
        [(status, stop, error)] = sql(
            database_url,
            "SELECT status, stop_reason, error FROM helix.runs WHERE run_id = %s",
            each.run_id,
        )
        assert (status, stop) == ("failed", "usage_limit")
        assert error == f"Usage limit exceeded: total_tokens limit 5, used {2 + spent}"
        # The child completed and was counted once: its row, not its `subagent` row too.
        assert remote_row(database_url, each.session_id)[4] == "completed"
    # The parent never made its second model call: one call per run.
    assert len(lines(tmp_path, "llm_lead_limited.log")) == 2


def test_kill_the_remote_server_mid_run_its_recovery_finishes(
    database_url, child_database_url, tmp_path
):
    with (
        two_servers(database_url, child_database_url, tmp_path) as (parent, child),
        HelixClient(parent.url, token=TOKEN) as client,
    ):
        run = client.start("lead", "bats")
        wait_for(lambda: marked(tmp_path, "slow_bats.log"))
        child.kill()
        # The premise: the call was in flight when the child died, not recorded.
        assert slow_steps_recorded(child_database_url) == 0, "the tool ended before the kill"
        time.sleep(1.0)  # the parent's stream drops and retries meanwhile
        release(tmp_path, "bats")
        child.start()  # same executor id: DBOS recovers the child's run
        with HelixClient(parent.url, token=TOKEN) as client:
            final = client.wait(run.session_id, run.run_id)
    assert (final.status, final.output) == ("completed", "lead got: bats: read about bats")
    child_session = remote_session_id(run.session_id, "r1")
    assert [r[1] for r in child_runs(child_database_url, child_session)] == ["completed"]
    assert len(lines(tmp_path, "slow_bats.log")) == 2, "the call in flight ran again"
    assert slow_steps_recorded(child_database_url) == 1
    assert len(lines(tmp_path, "llm_lead.log")) == 2


def test_a_remote_server_that_is_down_is_retried_until_it_is_back(
    database_url, child_database_url, tmp_path
):
    """The start step fails while the child's server is down and DBOS retries it with
    backoff; once the server is back, the call goes through as if nothing happened."""
    with two_servers(database_url, child_database_url, tmp_path) as (parent, child):
        child.stop()
        with HelixClient(parent.url, token=TOKEN) as client:
            run = client.start("lead_patient", "fast-eels")
            time.sleep(2.0)  # a few attempts fail meanwhile
            assert client.status(run.session_id).current_run is not None
            child.start()
            final = client.wait(run.session_id, run.run_id)
    assert (final.status, final.output) == (
        "completed",
        "lead got: fast-eels: read about fast-eels",
    )
    child_session = remote_session_id(run.session_id, "r1")
    assert [r[1] for r in child_runs(child_database_url, child_session)] == ["completed"]
    [(attempts,)] = sql(
        database_url,
        "SELECT count(*) FROM dbos.operation_outputs o JOIN helix.runs r "
        "ON r.workflow_id = o.workflow_uuid WHERE r.run_id = %s "
        "AND o.function_name = 'helix.remote_start:worker'",
        run.run_id,
    )
    assert attempts == 1, "one checkpointed start step, however many attempts it took"


def test_interrupt_and_abort_of_the_parent_reach_the_remote_child(
    database_url, child_database_url, tmp_path
):
    with (
        two_servers(database_url, child_database_url, tmp_path) as (parent, child),
        HelixClient(parent.url, token=TOKEN) as client,
    ):
        run = client.start("lead", "cats")
        wait_for(lambda: marked(tmp_path, "slow_cats.log"))
        reached = client.interrupt(run.session_id, reason="stop")
        assert reached.run_id == run.run_id
        child_session = remote_session_id(run.session_id, "r1")
        # The child stops at its next step boundary: after its tool returns.
        wait_for(
            lambda: (
                sql(
                    child_database_url,
                    "SELECT count(*) FROM dbos.notifications n JOIN helix.runs r "
                    "ON r.workflow_id = n.destination_uuid WHERE r.session_id = %s "
                    "AND n.topic = 'helix.interrupt'",
                    child_session,
                )[0][0]
                == 1
            )
        )
        release(tmp_path, "cats")
        final = client.wait(run.session_id, run.run_id)
        assert final.status == "interrupted"
        assert child_runs(child_database_url, child_session)[0][1] == "interrupted"
        assert remote_row(database_url, run.session_id)[4] == "interrupted"

        second = client.start("lead", "rats")
        wait_for(lambda: marked(tmp_path, "slow_rats.log"))
        client.abort(second.session_id, reason="enough")
        rats = remote_session_id(second.session_id, "r1")
        wait_for(lambda: child_runs(child_database_url, rats)[0][1] == "aborted", 30)
        assert client.status(second.session_id).last_run.status == "aborted"


def test_an_abort_while_the_remote_child_starts_still_reaches_the_child(
    database_url, child_database_url, tmp_path
):
    """The parent is aborted after its start step sent the child's start and before the
    child's run exists: the abort finds no run to stop, so the start step must."""
    with (
        two_servers(database_url, child_database_url, tmp_path) as (parent, child),
        HelixClient(parent.url, token=TOKEN) as client,
    ):
        run = client.start("lead", "held-owls")
        wait_for(lambda: marked(tmp_path, "start_held.log"))
        client.abort(run.session_id, reason="enough")
        wait_for(lambda: run_status(database_url, run.run_id) == "aborted")
        child_session = remote_session_id(run.session_id, "r1")
        assert child_runs(child_database_url, child_session) == [], "the start is still held"
        release(tmp_path, "start")
        # Unaborted, the child would wait in its `slow` tool for a release that never comes.
        wait_for(
            lambda: [r[1] for r in child_runs(child_database_url, child_session)] == ["aborted"],
            30,
        )
        assert client.status(run.session_id).last_run.status == "aborted"


def test_auth_failure_unknown_agent_and_a_down_server_are_tool_errors(
    database_url, child_database_url, tmp_path
):
    with (
        two_servers(database_url, child_database_url, tmp_path) as (parent, child),
        HelixClient(parent.url, token=TOKEN) as client,
    ):
        outputs = {}
        for agent in ("lead_badauth", "lead_ghost", "lead_down"):
            run = client.start(agent, "fast-mice")
            outputs[agent] = (client.wait(run.session_id, run.run_id), run.session_id)
    bad, ghost, down = (outputs[a][0] for a in ("lead_badauth", "lead_ghost", "lead_down"))
    assert bad.status == "completed" and "HTTP 401" in bad.output, bad.output
    assert ghost.status == "completed" and "HTTP 404" in ghost.output and "ghost" in ghost.output
    assert down.status == "completed" and "could not be started" in down.output, down.output
    for agent, status in (("lead_badauth", "failed"), ("lead_ghost", "failed")):
        assert remote_row(database_url, outputs[agent][1])[4] == status
    assert sql(child_database_url, "SELECT count(*) FROM helix.runs") == [(0,)]


def test_the_two_server_example_runs(database_url):
    """examples/remote_agents.py (included whole in docs/remote-agents.md) as a user runs it."""
    example = Path(__file__).resolve().parent.parent / "examples" / "remote_agents.py"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "ANTHROPIC_", "OPENAI_"))
    }
    research_db = with_database(database_url, f"{database_name(database_url)}_research")
    try:
        done = forkserver.run(
            [sys.executable, str(example)],
            capture_output=True,
            text=True,
            timeout=240,
            env={**env, "HELIX_DATABASE_URL": database_url, "RESEARCH_DATABASE_URL": research_db},
        )
        assert done.returncode == 0, done.stderr
        printed = done.stdout.splitlines()
        assert printed[-2] == "completed The researcher says: Found: owls are nocturnal."
        assert printed[-1] == "sub-agent calls: 1"
        assert "[research] researcher: tool_end" in printed
        assert "[front] lead: run_completed" in printed
        [(status,)] = sql(research_db, "SELECT status FROM helix.sessions")
        assert status == "completed"
    finally:
        admin = with_database(database_url, "postgres")
        sql(admin, f'DROP DATABASE IF EXISTS "{database_name(research_db)}" WITH (FORCE)')
