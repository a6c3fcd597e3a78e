-- Remote sub-agents and keyed starts (issue 32).
--
-- helix.start_keys: `POST /start` with an `idempotency_key` starts at most one run. The key
-- is reserved (with the session and the turn its run will have) before the run opens, so
-- a retry after any crash finds either that run or nothing started, never a second run.
CREATE TABLE IF NOT EXISTS helix.start_keys (
    idempotency_key text PRIMARY KEY,
    session_id      text NOT NULL,
    agent_name      text NOT NULL,
    turn            integer NOT NULL,          -- the turn of the run this key starts
    run_id          text,                      -- set once the run is open
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- helix.remote_children: one row per call of a remote sub-agent tool (the parent's run and
-- call): where the child runs (url, agent, its session and run on that server), how far
-- its stream was proxied into the parent's, and how it ended, with its tokens.
CREATE TABLE IF NOT EXISTS helix.remote_children (
    parent_run_id     text NOT NULL,
    tool_call_id      text NOT NULL,
    parent_session_id text NOT NULL,
    parent_agent_name text NOT NULL,
    tool_name         text NOT NULL,
    url               text NOT NULL,
    agent_name        text NOT NULL,
    remote_session_id text NOT NULL,
    remote_run_id     text,
    status            text NOT NULL DEFAULT 'starting',
    error             text,
    last_seq          bigint NOT NULL DEFAULT 0,
    input_tokens      bigint,
    output_tokens     bigint,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (parent_run_id, tool_call_id)
);
CREATE INDEX IF NOT EXISTS remote_children_parent_idx
    ON helix.remote_children (parent_session_id);
