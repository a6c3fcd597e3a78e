-- One durable stream-chunk row per agent step (issue 48, cut 3): the events a step's
-- write adds to the stream (a fast call's `tool_start`, its `custom` events, `tool_end`,
-- `state_patch`, ...) are one `helix.stream_chunks` row instead of one row each (9 rows
-- a step become 8). A run's lifecycle event among them (`run_interrupted`,
-- `run_stopped`: the step that ends a run) stays a row of its own, so every reader, an
-- older build's too, sees a run end; the events on each side of it are a row each, so
-- rows never interleave their seqs.
--
-- Numbering does not change: every event keeps its own seq, taken from
-- `sessions.chunk_seq` as before. The row is its LAST event: `seq`, `chunk_key`, `type`
-- and `payload` are that event's, and `prior_events` holds the row's events before it,
-- in order, each `{"seq", "key", "type", "payload"}` (NULL for a row of one event, as is
-- every row written before this migration or by a build before it). So a row with seq N
-- holds exactly the events up to N since the row before it: a reader resuming after any
-- event's seq reads the rows with `seq > after` and keeps their events with
-- `seq > after`. Rows never interleave their seqs: each statement takes its block of
-- seqs under the session's row lock, and gives its rows consecutive stretches of it.
--
-- Readers: `helix.stream_events` is the stream one row per event, with the table's
-- columns (what `helix.stream_chunks` was before: query it by `type`). A reader of an
-- older build, which selects the table's columns, sees the last event of each combined
-- row with its own seq and nothing of the events before it (never a wrong seq, a
-- duplicate or an unknown type). An older build keeps writing one row per chunk: its
-- step statement is its own SQL, and its call of `helix.end_step_and_run` sends chunk
-- records without `grp`, which this version writes one row each, as before.
ALTER TABLE helix.stream_chunks ADD COLUMN IF NOT EXISTS prior_events jsonb;
COMMENT ON COLUMN helix.stream_chunks.prior_events IS
    'The events of this row before its own (seq, key, type, payload), in order; NULL: the row is one event. Read helix.stream_events for one row per event';

CREATE OR REPLACE VIEW helix.stream_events AS
SELECT c.session_id, e.seq, e.chunk_key, c.run_id, c.agent_name, c.step, e.type, e.payload,
       c.created_at, c.source_session_id, c.via_run_id
FROM helix.stream_chunks c
CROSS JOIN LATERAL (
    SELECT CAST(x ->> 'seq' AS bigint) AS seq, x ->> 'key' AS chunk_key, x ->> 'type' AS type,
           x -> 'payload' AS payload
    FROM jsonb_array_elements(c.prior_events) AS x
    UNION ALL
    SELECT c.seq, c.chunk_key, c.type, c.payload) e;
COMMENT ON VIEW helix.stream_events IS
    'Each session''s stream, one row per event: helix.stream_chunks with each row''s prior_events unfolded';

-- The root copy (migration 0005) takes a row's events: a combined row gets as many of
-- the root's seqs as it has events, and its copy's `prior_events` carry the root's seqs
-- and keys (`@root`, like the row's).
CREATE OR REPLACE FUNCTION helix.copy_chunks_to_root() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    roots integer;
BEGIN
    -- The copies' own insert fires this trigger again: nothing to copy there.
    IF pg_trigger_depth() > 1 OR NOT EXISTS (
        SELECT 1 FROM new_rows n JOIN helix.sessions s ON s.session_id = n.session_id
        WHERE n.source_session_id IS NULL AND s.root_session_id IS NOT NULL
    ) THEN
        RETURN NULL;
    END IF;
    WITH src AS (
        SELECT n.*, s.root_session_id AS root,
               1 + COALESCE(jsonb_array_length(n.prior_events), 0) AS width,
               sum(1 + COALESCE(jsonb_array_length(n.prior_events), 0)) OVER (
                   PARTITION BY s.root_session_id ORDER BY n.session_id, n.seq) AS ord
        FROM new_rows n JOIN helix.sessions s ON s.session_id = n.session_id
        WHERE n.source_session_id IS NULL AND s.root_session_id IS NOT NULL
    ), counts AS (
        SELECT root, sum(width) AS n FROM src GROUP BY root
    ), bumped AS (
        UPDATE helix.sessions r SET chunk_seq = r.chunk_seq + c.n
        FROM counts c WHERE r.session_id = c.root
        RETURNING r.session_id AS root, r.chunk_seq - c.n AS base
    ), ins AS (
        INSERT INTO helix.stream_chunks
            (session_id, seq, chunk_key, run_id, agent_name, step, type, payload, created_at,
             source_session_id, via_run_id, prior_events)
        SELECT src.root, b.base + src.ord, src.chunk_key || '@root', src.run_id, src.agent_name,
               src.step, src.type, src.payload, src.created_at, src.session_id,
               (SELECT lr.run_id FROM helix.runs lr WHERE lr.session_id = src.root
                  AND lr.status IN ('running', 'waiting', 'paused')),
               (SELECT jsonb_agg(x.e || jsonb_build_object(
                           'seq', b.base + src.ord - src.width + x.i,
                           'key', (x.e ->> 'key') || '@root') ORDER BY x.i)
                FROM jsonb_array_elements(src.prior_events) WITH ORDINALITY AS x(e, i))
        FROM src JOIN bumped b ON b.root = src.root
        ON CONFLICT (chunk_key) DO NOTHING
        RETURNING session_id
    )
    SELECT count(pg_notify('helix_chunks', root)) INTO roots
    FROM (SELECT DISTINCT session_id AS root FROM ins) x;
    RETURN NULL;
END;
$$;


-- A run's last write (migration 0027's function, same arguments): the step's chunks that
-- `p_chunks` gives one `grp` (among the first `p_nstep`, from this build on) are one
-- row, as the step statement writes them; everything else as migration 0027 wrote it.
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
    -- The chunks: end chunks (after the first `p_nstep`) one row each, as before; the
    -- step's chunks that share a `grp` in one row (see above); those without one (a
    -- run's lifecycle chunk, and every chunk of an older build) one row each. A chunk
    -- of a `grp` already written (a `tool_start` shown live) is left out, as the unique
    -- key left it out before.
    ev AS (
        SELECT c.ord, c.key, c.type, COALESCE(c.payload, '{}'::jsonb) AS payload, c.grp
        FROM jsonb_to_recordset(CAST(p_chunks AS jsonb))
             AS c(ord int, key text, type text, payload jsonb, grp int)
        WHERE (c.ord > p_nstep OR (SELECT rest FROM claim))
          AND NOT (c.grp IS NOT NULL AND EXISTS (
              SELECT 1 FROM helix.stream_chunks x WHERE x.chunk_key = c.key))),
    c AS (
        INSERT INTO helix.stream_chunks (session_id, seq, chunk_key, run_id, agent_name, step,
                                         type, payload, prior_events)
        SELECT p_sid, s.chunk_base + e.ord, e.key, p_rid, p_agent, p_step, e.type, e.payload,
               (SELECT jsonb_agg(jsonb_build_object('seq', s.chunk_base + g.ord,
                           'key', g.key, 'type', g.type, 'payload', g.payload) ORDER BY g.ord)
                FROM ev g WHERE g.grp = e.grp AND g.ord < e.ord)
        FROM s, ev e
        WHERE e.grp IS NULL OR e.ord = (SELECT max(ord) FROM ev h WHERE h.grp = e.grp)
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
