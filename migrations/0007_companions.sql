-- Persistent sub-agents (seed 002's companions): one row per named child of a parent
-- session. The child's session id is stable, {parent_session_id}-agent-{name}; its status
-- is its session's. `notified_run_id` is the child's last run whose end a non-blocking
-- parent was told of, in its next model input (exactly once: set in the same transaction
-- that appends the notice).

CREATE TABLE IF NOT EXISTS helix.companions (
    parent_session_id text NOT NULL REFERENCES helix.sessions (session_id),
    name              text NOT NULL,
    session_id        text NOT NULL REFERENCES helix.sessions (session_id),
    agent_name        text NOT NULL,
    mode              text NOT NULL,                  -- blocking | non_blocking
    notified_run_id   text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (parent_session_id, name)
);
CREATE UNIQUE INDEX IF NOT EXISTS companions_session_idx ON helix.companions (session_id);
