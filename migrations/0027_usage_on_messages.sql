-- Usage on the message rows (issue 48, cut 2): an agent step writes its LLM call's usage
-- on the assistant message and each tool call's on the call's result message, in the
-- same row, instead of two `helix.usage` rows besides (11 rows a step become 9).
--
-- `helix.usage` stays what users query: a view with the same columns, in the same order,
-- and the same rows, usage ids and values as the table had. The table is renamed
-- `helix.usage_rows` and keeps every row written before this migration, and from now on
-- the usage no message carries (summaries, a failed call's step, a step whose messages
-- were not written because its run ended first). `helix.messages` becomes a child of it
-- (table inheritance), with the usage columns it did not have, set only on a message
-- that carries usage; its session_id, run_id, tool_name and created_at are the usage's
-- (one statement: the same now()). So the view is a plain filter on one table,
-- `usage_rows` and its child, and stays insertable: an older build's
-- `INSERT INTO helix.usage ... ON CONFLICT (usage_id) DO NOTHING` still works (a view
-- over a UNION would refuse it), and a process of the previous release keeps working on
-- a database this migration ran on (docs/upgrading.md).
--
-- helix.messages.step: the agent step that wrote the message (NULL for input, steered
-- and pairing messages, and for every message written before this migration): a carried
-- usage's step, and the key the checkpoint trigger (migration 0013, unchanged: it reads
-- `helix.usage` by run and step) and derived checkpoints (cut 4) read a step's rows by.
-- A fork copies messages without their usage columns, so a fork's usage is counted
-- once, in its source. Read `helix.usage`, never `helix.usage_rows`: a query on the
-- parent table also reads every message (`ONLY helix.usage_rows` reads its own rows).
ALTER TABLE helix.usage RENAME TO usage_rows;
COMMENT ON TABLE helix.usage_rows IS
    'Usage no message carries, and (inherited) helix.messages; query the view helix.usage';

ALTER TABLE helix.messages
    ADD COLUMN IF NOT EXISTS step integer,
    ADD COLUMN IF NOT EXISTS usage_id text,
    ADD COLUMN IF NOT EXISTS agent_name text,
    ADD COLUMN IF NOT EXISTS kind text,
    ADD COLUMN IF NOT EXISTS model text,
    ADD COLUMN IF NOT EXISTS input_tokens integer,
    ADD COLUMN IF NOT EXISTS output_tokens integer,
    ADD COLUMN IF NOT EXISTS cache_read_tokens integer,
    ADD COLUMN IF NOT EXISTS cache_write_tokens integer,
    ADD COLUMN IF NOT EXISTS reasoning_tokens integer,
    ADD COLUMN IF NOT EXISTS duration_ms double precision,
    ADD COLUMN IF NOT EXISTS success boolean,
    ADD COLUMN IF NOT EXISTS cost_usd numeric;
-- The run index gains the step (the trigger's read of a step's usage stays an index
-- probe at step 10,000); one index a message, as before.
CREATE INDEX IF NOT EXISTS messages_run_step_idx ON helix.messages (run_id, step);
DROP INDEX IF EXISTS helix.messages_run_idx;

-- A child's rows must satisfy its parent's NOT NULLs, and a message without usage has
-- none: the parent keeps them as a check of its own rows (NO INHERIT), and its primary
-- key becomes a unique index on usage_id (what ON CONFLICT (usage_id) infers).
CREATE UNIQUE INDEX IF NOT EXISTS usage_rows_usage_id_key ON helix.usage_rows (usage_id);
ALTER TABLE helix.usage_rows DROP CONSTRAINT IF EXISTS usage_pkey;
ALTER TABLE helix.usage_rows
    ALTER COLUMN usage_id DROP NOT NULL,
    ALTER COLUMN session_id DROP NOT NULL,
    ALTER COLUMN run_id DROP NOT NULL,
    ALTER COLUMN agent_name DROP NOT NULL,
    ALTER COLUMN step DROP NOT NULL,
    ALTER COLUMN kind DROP NOT NULL,
    ALTER COLUMN input_tokens DROP NOT NULL,
    ALTER COLUMN output_tokens DROP NOT NULL,
    ALTER COLUMN cache_read_tokens DROP NOT NULL,
    ALTER COLUMN cache_write_tokens DROP NOT NULL,
    ALTER COLUMN reasoning_tokens DROP NOT NULL,
    ALTER COLUMN success DROP NOT NULL,
    ALTER COLUMN created_at DROP NOT NULL,
    ADD CONSTRAINT usage_rows_complete CHECK (
        usage_id IS NOT NULL AND session_id IS NOT NULL AND run_id IS NOT NULL
        AND agent_name IS NOT NULL AND step IS NOT NULL AND kind IS NOT NULL
        AND input_tokens IS NOT NULL AND output_tokens IS NOT NULL
        AND cache_read_tokens IS NOT NULL AND cache_write_tokens IS NOT NULL
        AND reasoning_tokens IS NOT NULL AND success IS NOT NULL
        AND created_at IS NOT NULL) NO INHERIT;
ALTER TABLE helix.messages INHERIT helix.usage_rows;

CREATE VIEW helix.usage AS
SELECT usage_id, session_id, run_id, agent_name, step, kind, model, input_tokens,
       output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, tool_name,
       duration_ms, success, created_at, cost_usd
FROM helix.usage_rows
WHERE usage_id IS NOT NULL;
COMMENT ON VIEW helix.usage IS
    'One row per LLM call, tool call, sub-agent and client wait: helix.usage_rows and the usage carried by helix.messages';

-- The columns' meanings (migrations 0006, 0008) stay readable on the view.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT a.attname, col_description(a.attrelid, a.attnum) AS note
             FROM pg_attribute a
             WHERE a.attrelid = 'helix.usage_rows'::regclass AND a.attnum > 0
               AND NOT a.attisdropped AND col_description(a.attrelid, a.attnum) IS NOT NULL
    LOOP
        EXECUTE format('COMMENT ON COLUMN helix.usage.%I IS %L', c.attname, c.note);
    END LOOP;
END $$;

-- An INSERT into helix.usage goes to helix.usage_rows (the view is a plain filter), with
-- ON CONFLICT too. A usage id a message carries is not inserted again: an older build
-- that writes a step whose head this build wrote sends the head's LLM usage once more,
-- which a message carries, out of the reach of the unique index.
CREATE OR REPLACE FUNCTION helix.usage_row_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ONLY helix.messages m
               WHERE m.run_id = NEW.run_id AND m.step = NEW.step
                 AND m.usage_id = NEW.usage_id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER usage_row_once BEFORE INSERT ON helix.usage_rows
    FOR EACH ROW EXECUTE FUNCTION helix.usage_row_once();

-- An UPDATE or DELETE on helix.usage changes or removes the usage only: a row of
-- helix.usage_rows, or a message's usage columns (never the message).
CREATE OR REPLACE FUNCTION helix.usage_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        UPDATE ONLY helix.usage_rows u SET
            usage_id = NEW.usage_id, session_id = NEW.session_id, run_id = NEW.run_id,
            agent_name = NEW.agent_name, step = NEW.step, kind = NEW.kind, model = NEW.model,
            input_tokens = NEW.input_tokens, output_tokens = NEW.output_tokens,
            cache_read_tokens = NEW.cache_read_tokens,
            cache_write_tokens = NEW.cache_write_tokens,
            reasoning_tokens = NEW.reasoning_tokens, tool_name = NEW.tool_name,
            duration_ms = NEW.duration_ms, success = NEW.success, created_at = NEW.created_at,
            cost_usd = NEW.cost_usd
        WHERE u.usage_id = OLD.usage_id;
        IF NOT FOUND THEN
            UPDATE ONLY helix.messages m SET
                usage_id = NEW.usage_id, agent_name = NEW.agent_name, kind = NEW.kind,
                model = NEW.model, input_tokens = NEW.input_tokens,
                output_tokens = NEW.output_tokens, cache_read_tokens = NEW.cache_read_tokens,
                cache_write_tokens = NEW.cache_write_tokens,
                reasoning_tokens = NEW.reasoning_tokens, duration_ms = NEW.duration_ms,
                success = NEW.success, cost_usd = NEW.cost_usd
            WHERE m.run_id = OLD.run_id AND m.step = OLD.step AND m.usage_id = OLD.usage_id;
        END IF;
        RETURN NEW;
    END IF;
    DELETE FROM ONLY helix.usage_rows u WHERE u.usage_id = OLD.usage_id;
    IF NOT FOUND THEN
        UPDATE ONLY helix.messages m SET
            usage_id = NULL, agent_name = NULL, kind = NULL, model = NULL,
            input_tokens = NULL, output_tokens = NULL, cache_read_tokens = NULL,
            cache_write_tokens = NULL, reasoning_tokens = NULL, duration_ms = NULL,
            success = NULL, cost_usd = NULL
        WHERE m.run_id = OLD.run_id AND m.step = OLD.step AND m.usage_id = OLD.usage_id;
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER usage_write INSTEAD OF UPDATE OR DELETE ON helix.usage
    FOR EACH ROW EXECUTE FUNCTION helix.usage_write();

-- Rolled-back messages (migration 0016) keep the step; their usage goes to
-- helix.rolled_back_usage as rows, as before (`store/rollback.py`).
ALTER TABLE helix.rolled_back_messages ADD COLUMN IF NOT EXISTS step integer;


-- A run's last write (migration 0022's function): each message row of `p_rows` may carry
-- a usage (its usage columns), written on the message with its step; `p_usage` holds every usage
-- record of the step, each with the `ord` of the message that carries it (NULL: none).
-- A record goes to helix.usage_rows when no message carries it, or when its message is
-- not written because the run ended after the step's head (the abort paired the calls);
-- never when its message is the head written before (the head carried it then). Callers
-- of the old shape (no usage in rows, no `ord` in records) write every record as before.
CREATE OR REPLACE FUNCTION helix.end_step_and_run(
    p_sid text, p_rid text, p_agent text, p_step int,
    p_rows text, p_nmsg int, p_nhead int, p_state text, p_usage text,
    p_chunks text, p_nchunk int, p_nstep int,
    p_status text, p_output text, p_error text, p_stop text,
    p_notify boolean, p_dsc text, p_ow text, p_ox text,
    OUT ended boolean, OUT llm_calls bigint, OUT tool_calls bigint,
    OUT input_tokens bigint, OUT output_tokens bigint, OUT cache_read_tokens bigint,
    OUT cache_write_tokens bigint, OUT reasoning_tokens bigint, OUT subagent_calls bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    WITH p AS (
        SELECT committed_step < p_step AS claimed, committed_head < p_step AS with_head,
               status IN ('running', 'waiting', 'paused') AS live
        FROM helix.runs WHERE run_id = p_rid FOR UPDATE),
    r AS (
        UPDATE helix.runs SET
            committed_step = GREATEST(committed_step, p_step),
            committed_head = GREATEST(committed_head, p_step),
            step_count = CASE WHEN p.live THEN p_step ELSE step_count END,
            status = CASE WHEN p.live THEN p_status ELSE status END,
            output = CASE WHEN p.live THEN CAST(p_output AS json) ELSE output END,
            error = CASE WHEN p.live THEN p_error ELSE error END,
            waiting_for = CASE WHEN NOT p.live THEN waiting_for END,
            finished_at = CASE WHEN p.live THEN now() ELSE finished_at END,
            stop_reason = CASE WHEN p.live THEN p_stop ELSE stop_reason END
        FROM p WHERE run_id = p_rid AND (p.claimed OR p.live)
        RETURNING p.*),
    claim AS (
        SELECT live OR with_head AS rest,
               CASE WHEN with_head THEN p_nmsg WHEN live THEN p_nmsg - p_nhead ELSE 0 END AS n
        FROM r WHERE claimed),
    k AS (SELECT bool_or(claimed) AS claimed, bool_or(live) AS live FROM r),
    s AS (
        UPDATE helix.sessions SET
            message_seq = COALESCE(GREATEST(message_seq,
                (SELECT COALESCE(max(seq), 0) FROM helix.messages WHERE session_id = p_sid))
                + (SELECT n FROM claim), message_seq),
            chunk_seq = chunk_seq + p_nchunk,
            state = CASE WHEN k.claimed THEN COALESCE(CAST(p_state AS jsonb), state)
                         ELSE state END,
            status = CASE WHEN k.live THEN p_status ELSE status END,
            output = CASE WHEN k.live THEN CAST(p_output AS jsonb) ELSE output END,
            error = CASE WHEN k.live THEN p_error ELSE error END,
            updated_at = now()
        FROM k WHERE session_id = p_sid
        RETURNING message_seq - (SELECT n FROM claim) + 1 AS first_msg,
                  chunk_seq - p_nchunk AS chunk_base),
    msg AS (
        INSERT INTO helix.messages (session_id, seq, run_id, role, content, tool_calls,
                                    tool_call_id, tool_name, thinking, is_error, parts,
                                    step, usage_id, agent_name, kind, model, input_tokens,
                                    output_tokens, cache_read_tokens, cache_write_tokens,
                                    reasoning_tokens, duration_ms, success, cost_usd)
        SELECT p_sid, s.first_msg + m.ord - p_nmsg + claim.n, p_rid, m.role, m.content,
               m.tool_calls, m.tool_call_id, m.tool_name, m.thinking, COALESCE(m.is_error, false),
               m.parts, p_step, m.usage_id, m.agent_name, m.kind, m.model, m.input_tokens,
               m.output_tokens, m.cache_read_tokens, m.cache_write_tokens, m.reasoning_tokens,
               m.duration_ms, m.success, m.cost_usd
        FROM s, claim, jsonb_to_recordset(CAST(p_rows AS jsonb)) AS m(ord int, role text,
            content text, tool_calls jsonb, tool_call_id text, tool_name text, thinking jsonb,
            is_error boolean, parts jsonb, usage_id text, agent_name text, kind text,
            model text, input_tokens int, output_tokens int, cache_read_tokens int,
            cache_write_tokens int, reasoning_tokens int, duration_ms double precision,
            success boolean, cost_usd numeric)
        WHERE m.ord >= p_nmsg - claim.n
        RETURNING usage_id, kind, input_tokens, output_tokens, cache_read_tokens,
                  cache_write_tokens, reasoning_tokens),
    u AS (
        INSERT INTO helix.usage_rows (session_id, run_id, usage_id, agent_name, step, kind,
            model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
            reasoning_tokens, tool_name, duration_ms, success, cost_usd)
        SELECT p_sid, p_rid, x.usage_id, x.agent_name, x.step, x.kind, x.model,
               x.input_tokens, x.output_tokens, x.cache_read_tokens, x.cache_write_tokens,
               x.reasoning_tokens, x.tool_name, x.duration_ms, x.success, x.cost_usd
        FROM claim, jsonb_to_recordset(CAST(p_usage AS jsonb)) AS x(usage_id text,
            agent_name text, step int, kind text, model text, input_tokens int,
            output_tokens int, cache_read_tokens int, cache_write_tokens int,
            reasoning_tokens int, tool_name text, duration_ms double precision,
            success boolean, cost_usd numeric, ord int)
        WHERE x.ord IS NULL OR (x.ord >= p_nhead AND x.ord < p_nmsg - claim.n)
        ON CONFLICT (usage_id) DO NOTHING
        RETURNING kind, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                  reasoning_tokens),
    c AS (
        INSERT INTO helix.stream_chunks (session_id, seq, chunk_key, run_id, agent_name, step,
                                         type, payload)
        SELECT p_sid, s.chunk_base + c.ord, c.key, p_rid, p_agent, p_step, c.type,
               COALESCE(c.payload, '{}'::jsonb)
        FROM s, jsonb_to_recordset(CAST(p_chunks AS jsonb))
             AS c(ord int, key text, type text, payload jsonb)
        WHERE c.ord > p_nstep OR (SELECT rest FROM claim)
        ON CONFLICT (chunk_key) DO NOTHING)
    -- The owner check comes first in its AND, so it is evaluated whatever `k.live` is.
    -- The run's usage: what was there before this statement (the view), and what it
    -- wrote, which the view does not show within it.
    SELECT helix.owns(p_ow, p_ox) AND k.live IS TRUE, t.*
    INTO ended, llm_calls, tool_calls, input_tokens, output_tokens, cache_read_tokens,
         cache_write_tokens, reasoning_tokens, subagent_calls
    FROM (SELECT count(*) FILTER (WHERE kind = 'llm'),
                 count(*) FILTER (WHERE kind = 'tool'),
                 COALESCE(sum(input_tokens) FILTER (WHERE kind <> 'subagent'), 0),
                 COALESCE(sum(output_tokens) FILTER (WHERE kind <> 'subagent'), 0),
                 COALESCE(sum(cache_read_tokens) FILTER (WHERE kind <> 'subagent'), 0),
                 COALESCE(sum(cache_write_tokens) FILTER (WHERE kind <> 'subagent'), 0),
                 COALESCE(sum(reasoning_tokens) FILTER (WHERE kind <> 'subagent'), 0),
                 count(*) FILTER (WHERE kind = 'subagent')
          FROM (SELECT kind, input_tokens, output_tokens, cache_read_tokens,
                       cache_write_tokens, reasoning_tokens
                FROM helix.usage WHERE run_id = p_rid
                UNION ALL TABLE u
                UNION ALL
                SELECT kind, input_tokens, output_tokens, cache_read_tokens,
                       cache_write_tokens, reasoning_tokens
                FROM msg WHERE usage_id IS NOT NULL) AS usage) t, k;
    IF p_dsc IS NOT NULL THEN
        DELETE FROM dbos.datasource_outputs WHERE workflow_id = p_dsc;
    END IF;
    PERFORM pg_notify('helix_chunks', p_sid);
    IF p_notify THEN
        PERFORM pg_notify('helix_run_end', p_rid);
    END IF;
END
$$;
