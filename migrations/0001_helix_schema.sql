-- helix_dbos: sessions, runs, transcript, pending tool calls, usage and stream chunks.
-- Every table is keyed so that a replayed write is a no-op (INSERT ... ON CONFLICT DO NOTHING).

CREATE SCHEMA IF NOT EXISTS helix;

CREATE TABLE IF NOT EXISTS helix.sessions (
    session_id        text PRIMARY KEY,
    agent_name        text NOT NULL,
    status            text NOT NULL DEFAULT 'idle',   -- idle | running | waiting | completed | failed | interrupted | aborted
    state             jsonb NOT NULL DEFAULT '{}'::jsonb,
    output            jsonb,
    error             text,
    parent_session_id text REFERENCES helix.sessions (session_id),
    turn_count        integer NOT NULL DEFAULT 0,
    chunk_seq         bigint NOT NULL DEFAULT 0,       -- last stream chunk sequence number
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sessions_parent_idx ON helix.sessions (parent_session_id);

CREATE TABLE IF NOT EXISTS helix.runs (
    run_id          text PRIMARY KEY,
    session_id      text NOT NULL REFERENCES helix.sessions (session_id),
    workflow_id     text NOT NULL UNIQUE,
    agent_name      text NOT NULL,
    turn            integer NOT NULL,
    status          text NOT NULL DEFAULT 'running', -- running | waiting | paused | completed | failed | interrupted | aborted
    step_count      integer NOT NULL DEFAULT 0,
    max_steps       integer,
    start_sequence  bigint NOT NULL DEFAULT 0,       -- first stream chunk sequence of this run
    output          jsonb,
    error           text,
    waiting_for     text,                             -- approval | client_tool | human_input, while waiting or paused
    options         jsonb NOT NULL DEFAULT '{}'::jsonb, -- run options (terminating config, ...)
    waiting_since   timestamptz,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX IF NOT EXISTS runs_session_idx ON helix.runs (session_id, turn);
CREATE INDEX IF NOT EXISTS runs_status_idx ON helix.runs (status);
-- At most one live run per session: the database, not the process, says "already running".
CREATE UNIQUE INDEX IF NOT EXISTS runs_one_live_per_session
    ON helix.runs (session_id) WHERE status IN ('running', 'waiting', 'paused');

CREATE TABLE IF NOT EXISTS helix.messages (
    session_id   text NOT NULL REFERENCES helix.sessions (session_id),
    seq          integer NOT NULL,
    run_id       text REFERENCES helix.runs (run_id),
    role         text NOT NULL,                       -- system | user | assistant | tool
    content      text,
    tool_calls   jsonb,                               -- [{id, name, arguments}] on assistant messages
    tool_call_id text,
    tool_name    text,
    thinking     jsonb,
    is_error     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS messages_run_idx ON helix.messages (run_id);

CREATE TABLE IF NOT EXISTS helix.tool_calls (
    session_id    text NOT NULL REFERENCES helix.sessions (session_id),
    tool_call_id  text NOT NULL,
    run_id        text NOT NULL REFERENCES helix.runs (run_id),
    workflow_id   text NOT NULL,
    tool_name     text NOT NULL,
    kind          text NOT NULL,                      -- approval | client | human_input
    status        text NOT NULL DEFAULT 'pending',    -- pending | approved | denied | completed | failed | timed_out | aborted
    input         jsonb,
    result        jsonb,
    error         text,
    reason        text,
    deadline_at   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    answered_at   timestamptz,                        -- when an answer was sent through the API
    resolved_at   timestamptz,
    PRIMARY KEY (run_id, tool_call_id)
);
CREATE INDEX IF NOT EXISTS tool_calls_session_idx ON helix.tool_calls (session_id, tool_call_id);
CREATE INDEX IF NOT EXISTS tool_calls_pending_idx ON helix.tool_calls (status) WHERE status = 'pending';

CREATE TABLE IF NOT EXISTS helix.usage (
    usage_id            text PRIMARY KEY,             -- deterministic: run, step, kind, index
    session_id          text NOT NULL,
    run_id              text NOT NULL,
    agent_name          text NOT NULL,
    step                integer NOT NULL,
    kind                text NOT NULL,                -- llm | tool | subagent | client_tool_wait_ms
    model               text,
    input_tokens        integer NOT NULL DEFAULT 0,
    output_tokens       integer NOT NULL DEFAULT 0,
    cache_read_tokens   integer NOT NULL DEFAULT 0,
    cache_write_tokens  integer NOT NULL DEFAULT 0,
    reasoning_tokens    integer NOT NULL DEFAULT 0,
    tool_name           text,
    duration_ms         double precision,
    success             boolean NOT NULL DEFAULT true,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS usage_session_idx ON helix.usage (session_id);
CREATE INDEX IF NOT EXISTS usage_run_idx ON helix.usage (run_id);

-- Sequence numbers come from sessions.chunk_seq, taken under the session's row lock,
-- so within a session a chunk with a higher seq never commits before a lower one.
CREATE TABLE IF NOT EXISTS helix.stream_chunks (
    session_id  text NOT NULL,
    seq         bigint NOT NULL,
    chunk_key   text NOT NULL,                        -- deterministic, so a replayed emit is a no-op
    run_id      text,
    agent_name  text,
    step        integer,
    type        text NOT NULL,
    payload     jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq),
    UNIQUE (chunk_key)
);
CREATE INDEX IF NOT EXISTS stream_chunks_run_idx ON helix.stream_chunks (run_id, seq);

-- Every run waiting for a human, with what it waits for and since when.
CREATE OR REPLACE VIEW helix.waiting_runs AS
SELECT r.run_id, r.session_id, r.agent_name, r.workflow_id, r.waiting_for, r.waiting_since,
       t.tool_call_id, t.tool_name, t.kind, t.input, t.deadline_at
FROM helix.runs r
JOIN helix.tool_calls t ON t.run_id = r.run_id AND t.status = 'pending'
WHERE r.status IN ('waiting', 'paused');

-- __store_memory__ / __retrieve_memory__: scoped to one run, with an optional expiry.
CREATE TABLE IF NOT EXISTS helix.memory (
    run_id      text NOT NULL REFERENCES helix.runs (run_id),
    key         text NOT NULL,
    value       jsonb,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    PRIMARY KEY (run_id, key)
);

-- __log_progress__: milestones for monitoring dashboards.
CREATE TABLE IF NOT EXISTS helix.progress (
    run_id       text NOT NULL REFERENCES helix.runs (run_id),
    tool_call_id text NOT NULL,
    session_id   text NOT NULL,
    agent_name   text NOT NULL,
    message      text NOT NULL,
    milestone    text,
    data         jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_call_id)
);
