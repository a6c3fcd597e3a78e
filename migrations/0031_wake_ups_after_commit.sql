-- Wake-ups after the commit, not in it (issue 48). PostgreSQL serialises the commits of
-- all transactions that called NOTIFY, cluster-wide (a lock on the database, held through
-- the commit's WAL flush), so the NOTIFY in each step's write made the steps of two worker
-- processes commit one at a time. This build's step statement sends none, and its call
-- of `helix.end_step_and_run` passes `p_wake => false`: it sends the wake-ups itself just
-- after, in a statement that does not wait for its flush (`runtime/process/wake_ups.py`).
--
-- The function gains that last argument with a default, so an older build's call (the
-- same arguments but it) still resolves, to this function, and still notifies with its
-- commit. Its body is migration 0028's otherwise. The old signature is dropped first:
-- with both, an older build's call would be ambiguous.

DROP FUNCTION IF EXISTS helix.end_step_and_run(
    text, text, text, int, text, int, int, text, text, text, int, int,
    text, text, text, text, boolean, text, text, text);

CREATE FUNCTION helix.end_step_and_run(
    p_sid text, p_rid text, p_agent text, p_step int,
    p_rows text, p_nmsg int, p_nhead int, p_state text, p_usage text,
    p_chunks text, p_nchunk int, p_nstep int,
    p_status text, p_output text, p_error text, p_stop text,
    p_notify boolean, p_dsc text, p_ow text, p_ox text,
    p_wake boolean DEFAULT true,
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
    IF p_wake THEN
        PERFORM pg_notify('helix_chunks', p_sid);
        IF p_notify THEN
            PERFORM pg_notify('helix_run_end', p_rid);
        END IF;
    END IF;
END
$$;
