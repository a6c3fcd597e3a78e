-- Content parts (issue 49): images and documents beside a message's text.
--
-- The bytes are stored once, keyed by their sha256: a PDF that every step's request sends
-- again is one row here, whatever the number of steps, checkpoints or sessions that
-- reference it. A message keeps only references (`parts`: a JSON array of
-- {"kind": "blob", "sha256", "media_type", "size", "identifier"} or of URL parts), and so
-- do DBOS's step outputs. A blob is immutable: rows are only ever inserted, with
-- ON CONFLICT DO NOTHING, before or with the first row that references them.
CREATE TABLE IF NOT EXISTS helix.blobs (
    sha256      text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    media_type  text NOT NULL,
    size        bigint NOT NULL CHECK (size >= 0),
    data        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- Stored compressed out of line only when it pays: images and PDFs are compressed already.
ALTER TABLE helix.blobs ALTER COLUMN data SET STORAGE EXTERNAL;

ALTER TABLE helix.messages ADD COLUMN IF NOT EXISTS parts jsonb;
-- Rolled-back messages keep their parts too (double texting's rollback copies by name).
ALTER TABLE helix.rolled_back_messages ADD COLUMN IF NOT EXISTS parts jsonb;


-- A run's last write (migration 0020's function) inserts the step's messages with their
-- parts: the same function, with `parts` in its message columns.
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
                                    tool_call_id, tool_name, thinking, is_error, parts)
        SELECT p_sid, s.first_msg + m.ord - p_nmsg + claim.n, p_rid, m.role, m.content,
               m.tool_calls, m.tool_call_id, m.tool_name, m.thinking, COALESCE(m.is_error, false),
               m.parts
        FROM s, claim, jsonb_to_recordset(CAST(p_rows AS jsonb)) AS m(ord int, role text,
            content text, tool_calls jsonb, tool_call_id text, tool_name text, thinking jsonb,
            is_error boolean, parts jsonb)
        WHERE m.ord >= p_nmsg - claim.n),
    u AS (
        INSERT INTO helix.usage (session_id, run_id, usage_id, agent_name, step, kind, model,
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
            reasoning_tokens, tool_name, duration_ms, success, cost_usd)
        SELECT p_sid, p_rid, x.*
        FROM claim, jsonb_to_recordset(CAST(p_usage AS jsonb)) AS x(usage_id text,
            agent_name text, step int, kind text, model text, input_tokens int,
            output_tokens int, cache_read_tokens int, cache_write_tokens int,
            reasoning_tokens int, tool_name text, duration_ms double precision,
            success boolean, cost_usd numeric)
        ON CONFLICT (usage_id) DO NOTHING RETURNING *),
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
          FROM (SELECT * FROM helix.usage WHERE run_id = p_rid UNION ALL TABLE u) AS usage) t, k;
    IF p_dsc IS NOT NULL THEN
        DELETE FROM dbos.datasource_outputs WHERE workflow_id = p_dsc;
    END IF;
    PERFORM pg_notify('helix_chunks', p_sid);
    IF p_notify THEN
        PERFORM pg_notify('helix_run_end', p_rid);
    END IF;
END
$$;
