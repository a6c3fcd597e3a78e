-- Faster checkpoint reads (issue 48, after cut 4): the checkpoints of ONE session, derived
-- and stored, by a function that takes the session id, `helix.checkpoint_timeline_of`;
-- the two views of migration 0030 now read it, one session at a time, and list the same
-- rows with the same columns and types. Nothing is written differently: no step
-- sequence, no trigger, no stored row changes.
--
-- Why (benchmarks/bench_checkpoint_reads.py, one session of 1,000 derived steps): for
-- each checkpoint, migration 0030's view ran a LATERAL aggregate of its step's usage and
-- a subquery for the state in effect; it summed usage as numeric in 16 window functions
-- over rows partitioned by session; and, without planner statistics (a new database), it
-- re-read the session's stored rows for each derived step. Here:
--
-- - every scan names the session (`p_session_id`), whatever the planner pushes down;
-- - a step's usage is aggregated once per (run, step) over the runs the session's
--   checkpoints name (its stored rows' and its messages'), and joined: 0 where the
--   LATERAL found no row or was not asked (a row that stores its usage, a fork, a base);
--   a head's `llm` tokens are a subquery run for heads only;
-- - the anchor's stored usage (the last row that stores usage and is not a head) and
--   the state in effect are joins on the primary key (`anchor_at`, `state_at`), not
--   window functions or a correlated subquery per row;
-- - the running sums are bigint (`helix.checkpoint_usage_sum`: integer addition, which
--   fails past 2^63 where numeric would not) instead of numeric; the views cast back;
-- - one checkpoint (`helix.session_checkpoint`: `checkpoints.get`, a fork's source) is
--   computed alone, from the session's rows up to it: its last anchor, its state and
--   the usage of the step checkpoints between them, no window over the session.
--
-- The recurrences are migration 0030's (see there): a checkpoint's usage is the last
-- anchor's plus each step checkpoint's after it, up to it; a head adds its step's `llm`
-- usage. `helix.session_checkpoints_of` is `helix.session_checkpoints` for one session.
-- Older builds read the views, which keep their names and columns (rolling upgrade).

-- A sum of bigints as a bigint (sum(bigint) is numeric, and slower).
CREATE OR REPLACE AGGREGATE helix.checkpoint_usage_sum(bigint) (SFUNC = int8pl, STYPE = bigint);

CREATE OR REPLACE FUNCTION helix.checkpoint_timeline_of(p_session_id text)
RETURNS TABLE (session_id text, ord bigint, run_id text, step integer, kind text,
    message_seq integer, stored boolean, state jsonb, listed boolean,
    llm_calls bigint, tool_calls bigint, input_tokens bigint, output_tokens bigint,
    cache_read_tokens bigint, cache_write_tokens bigint, reasoning_tokens bigint,
    subagent_calls bigint, steps_llm_calls bigint, steps_tool_calls bigint,
    steps_input_tokens bigint, steps_output_tokens bigint, steps_cache_read_tokens bigint,
    steps_cache_write_tokens bigint, steps_reasoning_tokens bigint,
    steps_subagent_calls bigint, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
SELECT z.session_id, z.ord, z.run_id, z.step, z.kind, z.message_seq, z.stored,
       COALESCE(z.own_state, sx.state) AS state,
       z.kind <> 'base' AND (z.stored OR z.ord > COALESCE(z.floor, 0)) AS listed,
       COALESCE(z.s_llm_calls, z.b_llm_calls + z.h_llm_calls) AS llm_calls,
       COALESCE(z.s_tool_calls, z.b_tool_calls) AS tool_calls,
       COALESCE(z.s_input_tokens, z.b_input_tokens + z.h_input_tokens) AS input_tokens,
       COALESCE(z.s_output_tokens, z.b_output_tokens + z.h_output_tokens) AS output_tokens,
       COALESCE(z.s_cache_read_tokens, z.b_cache_read_tokens + z.h_cache_read_tokens)
           AS cache_read_tokens,
       COALESCE(z.s_cache_write_tokens, z.b_cache_write_tokens + z.h_cache_write_tokens)
           AS cache_write_tokens,
       COALESCE(z.s_reasoning_tokens, z.b_reasoning_tokens + z.h_reasoning_tokens)
           AS reasoning_tokens,
       COALESCE(z.s_subagent_calls, z.b_subagent_calls) AS subagent_calls,
       z.b_llm_calls, z.b_tool_calls, z.b_input_tokens, z.b_output_tokens,
       z.b_cache_read_tokens, z.b_cache_write_tokens, z.b_reasoning_tokens,
       z.b_subagent_calls, z.created_at
FROM (
    -- b_*: the anchor's usage (its stored one; 0 before any anchor) plus each step
    -- checkpoint's after it, up to this row (the anchor's own is 0: it stores usage).
    SELECT y.*,
        CASE WHEN y.anchor THEN y.s_llm_calls ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.llm_calls ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_llm_calls) OVER g END AS b_llm_calls,
        CASE WHEN y.anchor THEN y.s_tool_calls ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.tool_calls ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_tool_calls) OVER g END AS b_tool_calls,
        CASE WHEN y.anchor THEN y.s_input_tokens ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.input_tokens ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_input_tokens) OVER g END AS b_input_tokens,
        CASE WHEN y.anchor THEN y.s_output_tokens ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.output_tokens ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_output_tokens) OVER g END AS b_output_tokens,
        CASE WHEN y.anchor THEN y.s_cache_read_tokens ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.cache_read_tokens ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_cache_read_tokens) OVER g END
            AS b_cache_read_tokens,
        CASE WHEN y.anchor THEN y.s_cache_write_tokens ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.cache_write_tokens ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_cache_write_tokens) OVER g END
            AS b_cache_write_tokens,
        CASE WHEN y.anchor THEN y.s_reasoning_tokens ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.reasoning_tokens ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_reasoning_tokens) OVER g END
            AS b_reasoning_tokens,
        CASE WHEN y.anchor THEN y.s_subagent_calls ELSE
            CASE WHEN y.anchor_at IS NOT NULL THEN an.subagent_calls ELSE 0 END
            + helix.checkpoint_usage_sum(y.u_subagent_calls) OVER g END AS b_subagent_calls
    FROM (
        -- anchor_at: the last anchor up to this row (NULL: none; 0030's grp counted
        -- them); state_at: the stored row whose state is in effect (state_ord never
        -- decreases along a session); floor: the session's newest base, at any ord.
        SELECT x.*,
            max(x.ord) FILTER (WHERE x.anchor) OVER w AS anchor_at,
            max(x.state_ord) OVER w AS state_at,
            (SELECT max(b.ord) FROM helix.checkpoints b
             WHERE b.session_id = p_session_id AND b.kind = 'base') AS floor
        FROM (
            SELECT r.session_id, r.ord, r.run_id, r.step, r.kind, r.message_seq, r.stored,
                   r.own_state, r.state_ord, r.created_at, r.anchor,
                   r.s_llm_calls, r.s_tool_calls, r.s_input_tokens, r.s_output_tokens,
                   r.s_cache_read_tokens, r.s_cache_write_tokens, r.s_reasoning_tokens,
                   r.s_subagent_calls,
                   -- u_*: a step checkpoint's own usage (a row that stores none);
                   -- h_*: a head's (its step's llm usage)
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.llm_calls, 0) ELSE 0 END AS u_llm_calls,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.tool_calls, 0) ELSE 0 END AS u_tool_calls,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.input_tokens, 0) ELSE 0 END AS u_input_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.output_tokens, 0) ELSE 0 END AS u_output_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.cache_read_tokens, 0) ELSE 0 END
                       AS u_cache_read_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.cache_write_tokens, 0) ELSE 0 END
                       AS u_cache_write_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.reasoning_tokens, 0) ELSE 0 END
                       AS u_reasoning_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.subagent_calls, 0) ELSE 0 END AS u_subagent_calls,
                   CASE WHEN r.kind = 'head' AND r.s_llm_calls IS NULL
                        THEN COALESCE(u.llm_calls, 0) ELSE 0 END AS h_llm_calls,
                   CASE WHEN r.kind = 'head' AND r.s_llm_calls IS NULL
                        THEN (SELECT COALESCE(sum(v.input_tokens), 0) FROM helix.usage v
                              WHERE v.run_id = r.run_id AND v.step = r.step AND v.kind = 'llm')
                        ELSE 0 END AS h_input_tokens,
                   CASE WHEN r.kind = 'head' AND r.s_llm_calls IS NULL
                        THEN (SELECT COALESCE(sum(v.output_tokens), 0) FROM helix.usage v
                              WHERE v.run_id = r.run_id AND v.step = r.step AND v.kind = 'llm')
                        ELSE 0 END AS h_output_tokens,
                   CASE WHEN r.kind = 'head' AND r.s_llm_calls IS NULL
                        THEN (SELECT COALESCE(sum(v.cache_read_tokens), 0) FROM helix.usage v
                              WHERE v.run_id = r.run_id AND v.step = r.step AND v.kind = 'llm')
                        ELSE 0 END
                       AS h_cache_read_tokens,
                   CASE WHEN r.kind = 'head' AND r.s_llm_calls IS NULL
                        THEN (SELECT COALESCE(sum(v.cache_write_tokens), 0) FROM helix.usage v
                              WHERE v.run_id = r.run_id AND v.step = r.step AND v.kind = 'llm')
                        ELSE 0 END
                       AS h_cache_write_tokens,
                   CASE WHEN r.kind = 'head' AND r.s_llm_calls IS NULL
                        THEN (SELECT COALESCE(sum(v.reasoning_tokens), 0) FROM helix.usage v
                              WHERE v.run_id = r.run_id AND v.step = r.step AND v.kind = 'llm')
                        ELSE 0 END
                       AS h_reasoning_tokens
            FROM (
                SELECT c.session_id, c.ord, c.run_id, c.step, c.kind, c.message_seq,
                       true AS stored, c.state AS own_state, c.state_ord, c.created_at,
                       c.llm_calls IS NOT NULL AND c.kind <> 'head' AS anchor,
                       c.llm_calls AS s_llm_calls, c.tool_calls AS s_tool_calls,
                       c.input_tokens AS s_input_tokens, c.output_tokens AS s_output_tokens,
                       c.cache_read_tokens AS s_cache_read_tokens,
                       c.cache_write_tokens AS s_cache_write_tokens,
                       c.reasoning_tokens AS s_reasoning_tokens,
                       c.subagent_calls AS s_subagent_calls
                FROM helix.checkpoints c
                WHERE c.session_id = p_session_id
                UNION ALL
                -- A derived step: a committed step of a run that derives, with messages
                -- (the seq of its last one is the session's counter after it), and no
                -- stored row. Its created_at is its last message's (the same now()).
                SELECT d.session_id, helix.checkpoint_ord_at(d.message_seq), d.run_id, d.step,
                       'step', d.message_seq, false, NULL, NULL, d.created_at, false,
                       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
                FROM (SELECT m.session_id, m.run_id, m.step, max(m.seq) AS message_seq,
                             max(m.created_at) AS created_at
                      FROM helix.messages m JOIN helix.runs rr ON rr.run_id = m.run_id
                      WHERE m.session_id = p_session_id
                        AND m.step > rr.derived_after AND m.step <= rr.committed_step
                      GROUP BY m.session_id, m.run_id, m.step) d
                WHERE NOT EXISTS (SELECT 1 FROM helix.checkpoints s
                                  WHERE s.session_id = d.session_id AND s.run_id = d.run_id
                                    AND s.step = d.step AND s.kind IN ('step', 'base'))
            ) r
            -- The usage of each (run, step) of the runs this session's checkpoints name:
            -- its stored rows' and its messages' (a derived row's run is its messages').
            LEFT JOIN (
                SELECT v.run_id, v.step,
                       count(*) FILTER (WHERE v.kind = 'llm') AS llm_calls,
                       count(*) FILTER (WHERE v.kind = 'tool') AS tool_calls,
                       count(*) FILTER (WHERE v.kind = 'subagent') AS subagent_calls,
                       COALESCE(sum(v.input_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                           AS input_tokens,
                       COALESCE(sum(v.output_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                           AS output_tokens,
                       COALESCE(sum(v.cache_read_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                           AS cache_read_tokens,
                       COALESCE(sum(v.cache_write_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                           AS cache_write_tokens,
                       COALESCE(sum(v.reasoning_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                           AS reasoning_tokens
                FROM helix.usage v
                WHERE v.run_id IN (SELECT c.run_id FROM helix.checkpoints c
                                   WHERE c.session_id = p_session_id
                                   UNION
                                   SELECT m.run_id FROM helix.messages m
                                   WHERE m.session_id = p_session_id)
                GROUP BY v.run_id, v.step
            ) u ON u.run_id = r.run_id AND u.step = r.step
        ) x
        WINDOW w AS (ORDER BY x.ord ROWS UNBOUNDED PRECEDING)
    ) y
    LEFT JOIN helix.checkpoints an ON an.session_id = p_session_id AND an.ord = y.anchor_at
    WINDOW g AS (PARTITION BY y.anchor_at ORDER BY y.ord ROWS UNBOUNDED PRECEDING)
) z
LEFT JOIN helix.checkpoints sx ON sx.session_id = p_session_id AND sx.ord = z.state_at
$fn$;
COMMENT ON FUNCTION helix.checkpoint_timeline_of(text) IS
    'helix.checkpoint_timeline for one session (usage as bigint)';

-- `helix.session_checkpoints` for one session.
CREATE OR REPLACE FUNCTION helix.session_checkpoints_of(p_session_id text)
RETURNS TABLE (session_id text, ord bigint, checkpoint_id text, run_id text, step integer,
    kind text, message_seq integer, state jsonb, llm_calls integer, tool_calls integer,
    input_tokens bigint, output_tokens bigint, cache_read_tokens bigint,
    cache_write_tokens bigint, reasoning_tokens bigint, subagent_calls integer,
    created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
SELECT t.session_id, t.ord,
       CASE t.kind WHEN 'fork' THEN t.session_id || ':fork'
                   WHEN 'head' THEN t.run_id || ':' || t.step || ':head'
                   ELSE t.run_id || ':' || t.step END AS checkpoint_id,
       t.run_id, t.step, t.kind, t.message_seq, t.state,
       CAST(t.llm_calls AS integer), CAST(t.tool_calls AS integer),
       t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens,
       t.reasoning_tokens, CAST(t.subagent_calls AS integer), t.created_at
FROM helix.checkpoint_timeline_of(p_session_id) t
WHERE t.listed
$fn$;
COMMENT ON FUNCTION helix.session_checkpoints_of(text) IS
    'helix.session_checkpoints for one session';

-- One checkpoint of a session by its id (`checkpoints.get`, a fork's source), computed
-- alone: no window over the session. `b`: an ord at or above the checkpoint's, the
-- highest of a stored row that may bear the id and of the last message of a step that
-- may (a bound too high costs time, never a row); `r`: the rows of
-- `helix.checkpoint_timeline_of` up to it, as there; `t`: the checkpoint if listed, with
-- its last anchor and the stored row whose state is in effect (what the windows `w`
-- give); its usage (`z`): as the window `g` sums it, the anchor's plus the usage of each
-- step checkpoint after the anchor up to it, plus a head's own `llm` usage.
CREATE OR REPLACE FUNCTION helix.session_checkpoint(p_session_id text, p_checkpoint_id text)
RETURNS TABLE (session_id text, ord bigint, checkpoint_id text, run_id text, step integer,
    kind text, message_seq integer, state jsonb, llm_calls integer, tool_calls integer,
    input_tokens bigint, output_tokens bigint, cache_read_tokens bigint,
    cache_write_tokens bigint, reasoning_tokens bigint, subagent_calls integer,
    created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
WITH b AS (
    SELECT GREATEST(
        (SELECT max(s.ord) FROM helix.checkpoints s
         WHERE s.session_id = p_session_id
           AND p_checkpoint_id IN (s.session_id || ':fork',
                                   s.run_id || ':' || s.step || ':head',
                                   s.run_id || ':' || s.step)),
        (SELECT helix.checkpoint_ord_at(max(m.seq)) FROM helix.messages m
         WHERE m.session_id = p_session_id
           AND m.run_id || ':' || m.step = p_checkpoint_id)) AS upto),
r AS (
    SELECT c.ord, c.run_id, c.step, c.kind, c.message_seq, true AS stored,
           c.state AS own_state, c.state_ord, c.created_at,
           c.llm_calls IS NOT NULL AND c.kind <> 'head' AS anchor,
           c.llm_calls AS s_llm_calls, c.tool_calls AS s_tool_calls,
           c.input_tokens AS s_input_tokens, c.output_tokens AS s_output_tokens,
           c.cache_read_tokens AS s_cache_read_tokens,
           c.cache_write_tokens AS s_cache_write_tokens,
           c.reasoning_tokens AS s_reasoning_tokens, c.subagent_calls AS s_subagent_calls
    FROM helix.checkpoints c, b
    WHERE c.session_id = p_session_id AND c.ord <= b.upto
    UNION ALL
    SELECT helix.checkpoint_ord_at(d.message_seq), d.run_id, d.step, 'step', d.message_seq,
           false, NULL, NULL, d.created_at, false,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM (SELECT m.session_id, m.run_id, m.step, max(m.seq) AS message_seq,
                 max(m.created_at) AS created_at
          FROM helix.messages m JOIN helix.runs rr ON rr.run_id = m.run_id
          WHERE m.session_id = p_session_id
            AND m.step > rr.derived_after AND m.step <= rr.committed_step
          GROUP BY m.session_id, m.run_id, m.step) d, b
    WHERE helix.checkpoint_ord_at(d.message_seq) <= b.upto
      AND NOT EXISTS (SELECT 1 FROM helix.checkpoints s
                      WHERE s.session_id = d.session_id AND s.run_id = d.run_id
                        AND s.step = d.step AND s.kind IN ('step', 'base'))),
t AS (
    SELECT r.*,
           CASE r.kind WHEN 'fork' THEN p_session_id || ':fork'
                       WHEN 'head' THEN r.run_id || ':' || r.step || ':head'
                       ELSE r.run_id || ':' || r.step END AS checkpoint_id,
           (SELECT max(a.ord) FROM r a WHERE a.anchor AND a.ord <= r.ord) AS anchor_at,
           (SELECT max(x.state_ord) FROM r x WHERE x.ord <= r.ord) AS state_at
    FROM r
    WHERE CASE r.kind WHEN 'fork' THEN p_session_id || ':fork'
                      WHEN 'head' THEN r.run_id || ':' || r.step || ':head'
                      ELSE r.run_id || ':' || r.step END = p_checkpoint_id
      AND r.kind <> 'base'
      AND (r.stored OR r.ord > COALESCE((SELECT max(f.ord) FROM helix.checkpoints f
                                         WHERE f.session_id = p_session_id
                                           AND f.kind = 'base'), 0))),
z AS (
    SELECT t.*,
        CASE WHEN t.anchor THEN t.s_llm_calls
             ELSE COALESCE(an.llm_calls, 0) + su.llm_calls END AS b_llm_calls,
        CASE WHEN t.anchor THEN t.s_tool_calls
             ELSE COALESCE(an.tool_calls, 0) + su.tool_calls END AS b_tool_calls,
        CASE WHEN t.anchor THEN t.s_input_tokens
             ELSE COALESCE(an.input_tokens, 0) + su.input_tokens END AS b_input_tokens,
        CASE WHEN t.anchor THEN t.s_output_tokens
             ELSE COALESCE(an.output_tokens, 0) + su.output_tokens END AS b_output_tokens,
        CASE WHEN t.anchor THEN t.s_cache_read_tokens
             ELSE COALESCE(an.cache_read_tokens, 0) + su.cache_read_tokens END
            AS b_cache_read_tokens,
        CASE WHEN t.anchor THEN t.s_cache_write_tokens
             ELSE COALESCE(an.cache_write_tokens, 0) + su.cache_write_tokens END
            AS b_cache_write_tokens,
        CASE WHEN t.anchor THEN t.s_reasoning_tokens
             ELSE COALESCE(an.reasoning_tokens, 0) + su.reasoning_tokens END
            AS b_reasoning_tokens,
        CASE WHEN t.anchor THEN t.s_subagent_calls
             ELSE COALESCE(an.subagent_calls, 0) + su.subagent_calls END AS b_subagent_calls,
        hu.*
    FROM t
    LEFT JOIN helix.checkpoints an ON an.session_id = p_session_id AND an.ord = t.anchor_at
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE v.kind = 'llm') AS llm_calls,
               count(*) FILTER (WHERE v.kind = 'tool') AS tool_calls,
               count(*) FILTER (WHERE v.kind = 'subagent') AS subagent_calls,
               COALESCE(sum(v.input_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                   AS input_tokens,
               COALESCE(sum(v.output_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                   AS output_tokens,
               COALESCE(sum(v.cache_read_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                   AS cache_read_tokens,
               COALESCE(sum(v.cache_write_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                   AS cache_write_tokens,
               COALESCE(sum(v.reasoning_tokens) FILTER (WHERE v.kind <> 'subagent'), 0)
                   AS reasoning_tokens
        FROM r q JOIN helix.usage v ON v.run_id = q.run_id AND v.step = q.step
        WHERE q.kind = 'step' AND q.s_llm_calls IS NULL AND q.ord <= t.ord
          AND (t.anchor_at IS NULL OR q.ord > t.anchor_at)) su
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE v.kind = 'llm') AS h_llm_calls,
               COALESCE(sum(v.input_tokens) FILTER (WHERE v.kind = 'llm'), 0) AS h_input_tokens,
               COALESCE(sum(v.output_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                   AS h_output_tokens,
               COALESCE(sum(v.cache_read_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                   AS h_cache_read_tokens,
               COALESCE(sum(v.cache_write_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                   AS h_cache_write_tokens,
               COALESCE(sum(v.reasoning_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                   AS h_reasoning_tokens
        FROM helix.usage v
        WHERE t.kind = 'head' AND t.s_llm_calls IS NULL
          AND v.run_id = t.run_id AND v.step = t.step) hu)
SELECT p_session_id, z.ord, z.checkpoint_id, z.run_id, z.step, z.kind, z.message_seq,
       COALESCE(z.own_state, (SELECT x.state FROM helix.checkpoints x
                              WHERE x.session_id = p_session_id AND x.ord = z.state_at)),
       CAST(COALESCE(z.s_llm_calls, z.b_llm_calls + z.h_llm_calls) AS integer),
       CAST(COALESCE(z.s_tool_calls, z.b_tool_calls) AS integer),
       COALESCE(z.s_input_tokens, z.b_input_tokens + z.h_input_tokens),
       COALESCE(z.s_output_tokens, z.b_output_tokens + z.h_output_tokens),
       COALESCE(z.s_cache_read_tokens, z.b_cache_read_tokens + z.h_cache_read_tokens),
       COALESCE(z.s_cache_write_tokens, z.b_cache_write_tokens + z.h_cache_write_tokens),
       COALESCE(z.s_reasoning_tokens, z.b_reasoning_tokens + z.h_reasoning_tokens),
       CAST(COALESCE(z.s_subagent_calls, z.b_subagent_calls) AS integer),
       z.created_at
FROM z
$fn$;
COMMENT ON FUNCTION helix.session_checkpoint(text, text) IS
    'One checkpoint of helix.session_checkpoints by session and checkpoint id';

-- The views of migration 0030, same columns and types, one session at a time (a
-- checkpoint's session is a helix.sessions row: its run's, its messages', a fork's).
-- `WHERE session_id = ...` on them reads that session only; a query without it (say
-- `WHERE run_id = ...`) runs the function once per session, as 0030's view read every
-- session's rows.
CREATE OR REPLACE VIEW helix.checkpoint_timeline AS
SELECT s.session_id, t.ord, t.run_id, t.step, t.kind, t.message_seq, t.stored, t.state,
       t.listed,
       CAST(t.llm_calls AS numeric) AS llm_calls, CAST(t.tool_calls AS numeric) AS tool_calls,
       CAST(t.input_tokens AS numeric) AS input_tokens,
       CAST(t.output_tokens AS numeric) AS output_tokens,
       CAST(t.cache_read_tokens AS numeric) AS cache_read_tokens,
       CAST(t.cache_write_tokens AS numeric) AS cache_write_tokens,
       CAST(t.reasoning_tokens AS numeric) AS reasoning_tokens,
       CAST(t.subagent_calls AS numeric) AS subagent_calls,
       CAST(t.steps_llm_calls AS numeric) AS steps_llm_calls,
       CAST(t.steps_tool_calls AS numeric) AS steps_tool_calls,
       CAST(t.steps_input_tokens AS numeric) AS steps_input_tokens,
       CAST(t.steps_output_tokens AS numeric) AS steps_output_tokens,
       CAST(t.steps_cache_read_tokens AS numeric) AS steps_cache_read_tokens,
       CAST(t.steps_cache_write_tokens AS numeric) AS steps_cache_write_tokens,
       CAST(t.steps_reasoning_tokens AS numeric) AS steps_reasoning_tokens,
       CAST(t.steps_subagent_calls AS numeric) AS steps_subagent_calls,
       t.created_at
FROM helix.sessions s CROSS JOIN LATERAL helix.checkpoint_timeline_of(s.session_id) t;
COMMENT ON VIEW helix.checkpoint_timeline IS
    'Every checkpoint, stored and derived, with prune''s columns; query helix.session_checkpoints';

CREATE OR REPLACE VIEW helix.session_checkpoints AS
SELECT s.session_id, c.ord, c.checkpoint_id, c.run_id, c.step, c.kind, c.message_seq,
       c.state, c.llm_calls, c.tool_calls, c.input_tokens, c.output_tokens,
       c.cache_read_tokens, c.cache_write_tokens, c.reasoning_tokens, c.subagent_calls,
       c.created_at
FROM helix.sessions s CROSS JOIN LATERAL helix.session_checkpoints_of(s.session_id) c;
COMMENT ON VIEW helix.session_checkpoints IS
    'Every checkpoint of each session (stored in helix.checkpoints or derived from its step''s messages), with its id, the state in effect and the usage so far';
