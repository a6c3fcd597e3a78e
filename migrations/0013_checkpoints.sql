-- Time travel and branching (issue 30): a checkpoint per committed agent step, and sessions
-- forked from a checkpoint.
--
-- helix.checkpoints: one row per committed step ('step'), per step head written ahead of
-- the step ('head': before a wait for a human, its last message is the pending tool call;
-- also while a slow tool runs), and per fork ('fork': the
-- first checkpoint of a forked session). A checkpoint covers the session's messages with
-- seq <= message_seq. `state` is stored only when it changed; `state_ord` names the
-- checkpoint (same session) whose `state` is in effect. The usage columns are the
-- session's usage so far. `ord` orders checkpoints (oldest first). Its id is not stored
-- (a step writes as few bytes as it can): helix.session_checkpoints shows it, with the
-- state in effect.
--
-- Rows are written by a trigger on the runs row: every step write (the step's rows, its
-- head, the run's last step with its end) advances runs.committed_step or committed_head,
-- its idempotency key, in the same statement as the rows; the trigger fires only when the
-- key advances, in that statement, so a checkpoint commits exactly with its step's rows
-- and costs no round trip. Steps committed before this migration have no checkpoints
-- (they are not derived).

CREATE SEQUENCE IF NOT EXISTS helix.checkpoint_ord;

CREATE TABLE IF NOT EXISTS helix.checkpoints (
    session_id          text NOT NULL,
    ord                 bigint NOT NULL DEFAULT nextval('helix.checkpoint_ord'),
    run_id              text,            -- NULL for a fork's first checkpoint
    step                integer NOT NULL,
    kind                text NOT NULL,   -- step | head | fork
    message_seq         integer NOT NULL,
    state               jsonb,           -- NULL: unchanged since checkpoint state_ord
    state_ord           bigint NOT NULL,
    llm_calls           integer NOT NULL DEFAULT 0,
    tool_calls          integer NOT NULL DEFAULT 0,
    subagent_calls      integer NOT NULL DEFAULT 0,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cache_read_tokens   bigint NOT NULL DEFAULT 0,
    cache_write_tokens  bigint NOT NULL DEFAULT 0,
    reasoning_tokens    bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, ord)
);
COMMENT ON TABLE helix.checkpoints IS
    'One row per committed agent step (and per step head written ahead of its step, and per fork)';

ALTER TABLE helix.sessions ADD COLUMN IF NOT EXISTS forked_from_session_id text;
ALTER TABLE helix.sessions ADD COLUMN IF NOT EXISTS forked_from_checkpoint_id text;

-- A step's usage rows are read by (run, step) for its checkpoint: the run index gains the
-- step, so that read costs the same at step 10 and at step 10,000.
CREATE INDEX IF NOT EXISTS usage_run_step_idx ON helix.usage (run_id, step);
DROP INDEX IF EXISTS helix.usage_run_idx;

CREATE OR REPLACE FUNCTION helix.record_checkpoint() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    is_step  boolean := NEW.committed_step > OLD.committed_step;
    at_step  integer := CASE WHEN NEW.committed_step > OLD.committed_step
                             THEN NEW.committed_step ELSE NEW.committed_head END;
    new_ord  bigint := nextval('helix.checkpoint_ord');
    ses      record;
    prev     record;
    base     record;
    u        record;
    before   jsonb;
    changed  boolean := true;
BEGIN
    -- The session's row after this statement (the step's CTEs moved its counters).
    SELECT message_seq, state INTO ses FROM helix.sessions WHERE session_id = NEW.session_id;
    SELECT c.ord, c.state, c.state_ord INTO prev FROM helix.checkpoints c
        WHERE c.session_id = NEW.session_id ORDER BY c.ord DESC LIMIT 1;
    IF FOUND THEN
        before := prev.state;
        IF before IS NULL THEN
            SELECT c.state INTO before FROM helix.checkpoints c
                WHERE c.session_id = NEW.session_id AND c.ord = prev.state_ord;
        END IF;
        changed := before IS DISTINCT FROM ses.state;
    END IF;
    -- Usage so far: the last checkpoint that is not a head (whose step is counted here
    -- again, in full), plus this step's rows.
    SELECT c.llm_calls, c.tool_calls, c.subagent_calls, c.input_tokens, c.output_tokens,
           c.cache_read_tokens, c.cache_write_tokens, c.reasoning_tokens INTO base
        FROM helix.checkpoints c
        WHERE c.session_id = NEW.session_id AND c.kind <> 'head' ORDER BY c.ord DESC LIMIT 1;
    SELECT count(*) FILTER (WHERE kind = 'llm') AS llm_calls,
           count(*) FILTER (WHERE kind = 'tool') AS tool_calls,
           count(*) FILTER (WHERE kind = 'subagent') AS subagent_calls,
           COALESCE(sum(input_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS input_tokens,
           COALESCE(sum(output_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS output_tokens,
           COALESCE(sum(cache_read_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS cache_read_tokens,
           COALESCE(sum(cache_write_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS cache_write_tokens,
           COALESCE(sum(reasoning_tokens) FILTER (WHERE kind <> 'subagent'), 0) AS reasoning_tokens
        INTO u FROM helix.usage WHERE run_id = NEW.run_id AND step = at_step;
    INSERT INTO helix.checkpoints (session_id, ord, run_id, step, kind,
        message_seq, state, state_ord, llm_calls, tool_calls, subagent_calls, input_tokens,
        output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens)
    VALUES (NEW.session_id, new_ord, NEW.run_id, at_step, CASE WHEN is_step THEN 'step' ELSE 'head' END, ses.message_seq,
        CASE WHEN changed THEN ses.state END,
        CASE WHEN changed THEN new_ord ELSE prev.state_ord END,
        COALESCE(base.llm_calls, 0) + u.llm_calls,
        COALESCE(base.tool_calls, 0) + u.tool_calls,
        COALESCE(base.subagent_calls, 0) + u.subagent_calls,
        COALESCE(base.input_tokens, 0) + u.input_tokens,
        COALESCE(base.output_tokens, 0) + u.output_tokens,
        COALESCE(base.cache_read_tokens, 0) + u.cache_read_tokens,
        COALESCE(base.cache_write_tokens, 0) + u.cache_write_tokens,
        COALESCE(base.reasoning_tokens, 0) + u.reasoning_tokens);
    RETURN NULL;
END $$;

-- Each checkpoint with its id ('<run_id>:<step>', '<run_id>:<step>:head' or
-- '<session_id>:fork') and the state in effect.
CREATE OR REPLACE VIEW helix.session_checkpoints AS
SELECT c.session_id, c.ord,
       CASE c.kind WHEN 'fork' THEN c.session_id || ':fork'
                   WHEN 'head' THEN c.run_id || ':' || c.step || ':head'
                   ELSE c.run_id || ':' || c.step END AS checkpoint_id,
       c.run_id, c.step, c.kind, c.message_seq,
       COALESCE(c.state, (SELECT x.state FROM helix.checkpoints x
                          WHERE x.session_id = c.session_id AND x.ord = c.state_ord)) AS state,
       c.llm_calls, c.tool_calls, c.input_tokens, c.output_tokens, c.cache_read_tokens,
       c.cache_write_tokens, c.reasoning_tokens, c.subagent_calls, c.created_at
FROM helix.checkpoints c;

DROP TRIGGER IF EXISTS runs_checkpoint ON helix.runs;
CREATE TRIGGER runs_checkpoint
    AFTER UPDATE OF committed_step, committed_head ON helix.runs
    FOR EACH ROW
    WHEN (NEW.committed_step > OLD.committed_step OR NEW.committed_head > OLD.committed_head)
    EXECUTE FUNCTION helix.record_checkpoint();
