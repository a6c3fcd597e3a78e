-- Handoffs (issue 50): a run's agent handed the rest of the run, in the same session, to
-- another agent (`Agent(handoffs=[...])`, docs/handoffs.md). One row per handoff taken,
-- written by a `helix.handoff` datasource transaction of the run's workflow (exactly once
-- with its checkpoint; the key refuses a second row besides). The session's current
-- agent is the target of its latest handoff, else the agent of its latest run.
CREATE TABLE IF NOT EXISTS helix.handoffs (
    run_id        text NOT NULL,
    tool_call_id  text NOT NULL,
    session_id    text NOT NULL,
    step          integer NOT NULL,
    from_agent    text NOT NULL,
    to_agent      text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_call_id)
);

CREATE INDEX IF NOT EXISTS handoffs_session_idx ON helix.handoffs (session_id, created_at);
