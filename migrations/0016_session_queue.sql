-- Double texting (issue 31): a message sent while its session has a live run.
-- `enqueue`, `interrupt` and `rollback` messages wait here and start the session's next
-- run, in order; a `steer` message is taken into the live run's next model input.
-- `status`: queued (waiting) | started (its run is `run_id`) | steered (taken into run
-- `run_id` at its step `step`) | cancelled (before it was taken).
CREATE TABLE IF NOT EXISTS helix.queued_messages (
    message_id     text PRIMARY KEY,
    seq            bigserial NOT NULL UNIQUE,        -- storage order
    session_id     text NOT NULL REFERENCES helix.sessions (session_id),
    agent_name     text NOT NULL,
    strategy       text NOT NULL
        CHECK (strategy IN ('enqueue', 'interrupt', 'rollback', 'steer')),
    content        text,
    state          jsonb,                            -- the caller's state for its run, if any
    options        jsonb NOT NULL DEFAULT '{}'::jsonb, -- its run's options (a terminating config)
    target_run_id  text,                             -- the live run when it arrived
    status         text NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'started', 'steered', 'cancelled')),
    run_id         text,                             -- the run it started, or was steered into
    step           integer,                          -- steered: the step whose model input took it
    created_at     timestamptz NOT NULL DEFAULT now(),
    taken_at       timestamptz
);
CREATE INDEX IF NOT EXISTS queued_messages_waiting_idx
    ON helix.queued_messages (session_id, seq) WHERE status = 'queued';
CREATE UNIQUE INDEX IF NOT EXISTS queued_messages_run_idx
    ON helix.queued_messages (run_id) WHERE status = 'started';

-- A rolled-back run: its messages and usage leave the session's visible history for
-- these audit tables, and the session's state goes back to what it was when the run
-- started (`state_at_start`, recorded when the run's row commits).
ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS state_at_start jsonb;
ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS rolled_back_at timestamptz;
ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS rolled_back_by text;  -- the message id

CREATE TABLE IF NOT EXISTS helix.rolled_back_messages (LIKE helix.messages INCLUDING DEFAULTS);
ALTER TABLE helix.rolled_back_messages ADD COLUMN IF NOT EXISTS rolled_back_by text;
ALTER TABLE helix.rolled_back_messages ADD COLUMN IF NOT EXISTS rolled_back_at timestamptz
    NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS rolled_back_messages_run_idx ON helix.rolled_back_messages (run_id);

CREATE TABLE IF NOT EXISTS helix.rolled_back_usage (LIKE helix.usage INCLUDING DEFAULTS);
ALTER TABLE helix.rolled_back_usage ADD COLUMN IF NOT EXISTS rolled_back_by text;
ALTER TABLE helix.rolled_back_usage ADD COLUMN IF NOT EXISTS rolled_back_at timestamptz
    NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS rolled_back_usage_run_idx ON helix.rolled_back_usage (run_id);

-- Deferred to the commit that opens the run, so a run opened in the same statement as
-- its session (which it cannot see yet) records that session's state too.
CREATE OR REPLACE FUNCTION helix.remember_state_at_start() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE helix.runs r SET state_at_start = s.state
    FROM helix.sessions s
    WHERE r.run_id = NEW.run_id AND s.session_id = NEW.session_id
      AND r.state_at_start IS NULL;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS runs_state_at_start ON helix.runs;
CREATE CONSTRAINT TRIGGER runs_state_at_start AFTER INSERT ON helix.runs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION helix.remember_state_at_start();

-- Each waiting message with its place in line (1 = the session's next run): messages
-- sent to interrupt or roll back the live run first, then storage order (the order of
-- `orchestration/double_texting.start_order`).
CREATE OR REPLACE VIEW helix.queued_positions AS
SELECT q.message_id, q.session_id, q.strategy, q.content, q.target_run_id, q.created_at,
       row_number() OVER (PARTITION BY q.session_id
                          ORDER BY q.strategy IN ('interrupt', 'rollback') DESC, q.seq) AS position
FROM helix.queued_messages q
WHERE q.status = 'queued';
