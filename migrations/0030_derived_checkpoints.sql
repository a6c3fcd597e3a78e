-- Derived step checkpoints (issue 48, cut 4): an agent step no longer inserts a
-- `helix.checkpoints` row in the common case (its state unchanged, at least one message
-- written, not the run's first write). The view `helix.session_checkpoints` derives that
-- checkpoint from the step's messages (`helix.messages.step`, migration 0027) and its
-- usage (`helix.usage` by run and step), with the same id, order, message_seq, state,
-- cumulative usage and created_at the trigger of migration 0013 gave. Findings and design:
-- benchmarks/cut4_derived_checkpoints.md.
--
-- `helix.checkpoints` keeps the STORED rows: a step that writes a state, the run's first
-- write, a head, the run's last step (`helix.end_step_and_run`), a step that writes no
-- message, a fork, every step of an older build, and every row from before this
-- migration. Read `helix.session_checkpoints` for every checkpoint.
--
-- Which rows a step leaves to derive: the step statement of this build sets
-- `runs.unstored_step` to the step it claims, in the same UPDATE, when it needs no row;
-- the trigger fires for a step only when that column does not name it. An older build
-- never sets it, so each of its steps keeps a stored row (rolling upgrade), through this
-- migration's trigger function.
--
-- Order. A stored row from before this migration keeps its `ord` (a sequence value); a
-- checkpoint after it has ord `helix.checkpoint_ord_at(message_seq)`, 2^60 above any
-- sequence value, packed with its message_seq: a derived step takes exactly that (its
-- message_seq is the session's counter after its statement, which no other checkpoint
-- shares, see the findings), a stored row the next free ord above it. So ordering by ord
-- is what it was, runs spanning the migration too.
--
-- Usage. A row written from now on stores no usage (NULL): the view sums it at read time,
-- from the session's last row that stores usage and is not a head (an "anchor": a row
-- from before this migration, a fork's first row (0), a prune's base row), plus the usage
-- of each step checkpoint (run, step) after it; a head adds its step's `llm` usage, what
-- its step had written when the head was. The trigger computed the same recurrence.
--
-- Derived from which runs: `runs.derived_after` (the run's steps after it derive); NULL
-- for a run that ended before this migration (its steps are stored, or pruned: pruned
-- ones must not come back), the committed step for a run in flight now, 0 for a new run.
--
-- Prune hides derived rows it cannot delete: it leaves a stored `base` row at its edge
-- (the usage so far, the state in effect), never listed; a session's derived rows at or
-- below its newest base are not listed either (`checkpoint_rows.prune_session`).

ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS derived_after integer;
ALTER TABLE helix.runs ALTER COLUMN derived_after SET DEFAULT 0;
ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS unstored_step integer;
COMMENT ON COLUMN helix.runs.derived_after IS
    'Checkpoints of this run''s steps after it may be derived (helix.session_checkpoints); NULL: none';
COMMENT ON COLUMN helix.runs.unstored_step IS
    'The last step whose write left its checkpoint to be derived (no helix.checkpoints row)';
UPDATE helix.runs SET derived_after = committed_step
WHERE status IN ('running', 'waiting', 'paused');

-- Rows written from now on store no usage (the view sums it); a fork's first row, and an
-- older build's, still takes the default 0 (an anchor: a fork starts at 0).
ALTER TABLE helix.checkpoints
    ALTER COLUMN llm_calls DROP NOT NULL,
    ALTER COLUMN tool_calls DROP NOT NULL,
    ALTER COLUMN subagent_calls DROP NOT NULL,
    ALTER COLUMN input_tokens DROP NOT NULL,
    ALTER COLUMN output_tokens DROP NOT NULL,
    ALTER COLUMN cache_read_tokens DROP NOT NULL,
    ALTER COLUMN cache_write_tokens DROP NOT NULL,
    ALTER COLUMN reasoning_tokens DROP NOT NULL;
COMMENT ON TABLE helix.checkpoints IS
    'The stored checkpoints (a step that wrote state, a run''s first write, heads, run ends, forks, prune bases); helix.session_checkpoints lists every checkpoint';

-- The ord of a checkpoint after this migration at `message_seq` (a derived step's; a
-- stored row takes the next free one above it).
CREATE OR REPLACE FUNCTION helix.checkpoint_ord_at(message_seq integer) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT 1152921504606846976 + CAST(message_seq AS bigint) * 16777216 $$;

-- A stored checkpoint (migration 0013's, but for its ord and its usage): the state only
-- when it changed since the previous stored row (a derived row between them never
-- changes it: a step that writes a state is stored).
CREATE OR REPLACE FUNCTION helix.record_checkpoint() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    is_step  boolean := NEW.committed_step > OLD.committed_step;
    at_step  integer := CASE WHEN NEW.committed_step > OLD.committed_step
                             THEN NEW.committed_step ELSE NEW.committed_head END;
    new_ord  bigint;
    low      bigint;
    ses      record;
    prev     record;
    before   jsonb;
    changed  boolean := true;
BEGIN
    -- The session's row after this statement (the step's CTEs moved its counters).
    SELECT message_seq, state INTO ses FROM helix.sessions WHERE session_id = NEW.session_id;
    low := helix.checkpoint_ord_at(ses.message_seq);
    SELECT GREATEST(low + 1, COALESCE(max(c.ord) + 1, 0)) INTO new_ord
        FROM helix.checkpoints c WHERE c.session_id = NEW.session_id AND c.ord > low;
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
    INSERT INTO helix.checkpoints (session_id, ord, run_id, step, kind, message_seq, state,
        state_ord, llm_calls, tool_calls, subagent_calls, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens, reasoning_tokens)
    VALUES (NEW.session_id, new_ord, NEW.run_id, at_step,
        CASE WHEN is_step THEN 'step' ELSE 'head' END, ses.message_seq,
        CASE WHEN changed THEN ses.state END,
        CASE WHEN changed THEN new_ord ELSE prev.state_ord END,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    RETURN NULL;
END $$;

-- A head always; a step unless its write named it in `unstored_step`.
DROP TRIGGER IF EXISTS runs_checkpoint ON helix.runs;
CREATE TRIGGER runs_checkpoint
    AFTER UPDATE OF committed_step, committed_head ON helix.runs
    FOR EACH ROW
    WHEN ((NEW.committed_step > OLD.committed_step
           AND NEW.unstored_step IS DISTINCT FROM NEW.committed_step)
          OR (NEW.committed_head > OLD.committed_head
              AND NEW.committed_step = OLD.committed_step))
    EXECUTE FUNCTION helix.record_checkpoint();

-- Every checkpoint, stored and derived, with what the view and prune need:
-- `listed` (shown by helix.session_checkpoints), the usage as the row lists it
-- (`llm_calls`, ...), and `steps_*`: the usage of the step checkpoints up to it, without
-- a head's own (what a base row stores).
CREATE OR REPLACE VIEW helix.checkpoint_timeline AS
SELECT z.session_id, z.ord, z.run_id, z.step, z.kind, z.message_seq, z.stored,
       COALESCE(z.own_state, (SELECT x.state FROM helix.checkpoints x
                              WHERE x.session_id = z.session_id AND x.ord = z.state_at)) AS state,
       z.kind <> 'base' AND (z.stored OR z.ord > COALESCE(z.floor, 0)) AS listed,
       COALESCE(z.s_llm_calls, z.b_llm_calls + z.h_llm_calls) AS llm_calls,
       COALESCE(z.s_tool_calls, z.b_tool_calls + z.h_tool_calls) AS tool_calls,
       COALESCE(z.s_input_tokens, z.b_input_tokens + z.h_input_tokens) AS input_tokens,
       COALESCE(z.s_output_tokens, z.b_output_tokens + z.h_output_tokens) AS output_tokens,
       COALESCE(z.s_cache_read_tokens, z.b_cache_read_tokens + z.h_cache_read_tokens)
           AS cache_read_tokens,
       COALESCE(z.s_cache_write_tokens, z.b_cache_write_tokens + z.h_cache_write_tokens)
           AS cache_write_tokens,
       COALESCE(z.s_reasoning_tokens, z.b_reasoning_tokens + z.h_reasoning_tokens)
           AS reasoning_tokens,
       COALESCE(z.s_subagent_calls, z.b_subagent_calls + z.h_subagent_calls) AS subagent_calls,
       z.b_llm_calls AS steps_llm_calls, z.b_tool_calls AS steps_tool_calls,
       z.b_input_tokens AS steps_input_tokens, z.b_output_tokens AS steps_output_tokens,
       z.b_cache_read_tokens AS steps_cache_read_tokens,
       z.b_cache_write_tokens AS steps_cache_write_tokens,
       z.b_reasoning_tokens AS steps_reasoning_tokens,
       z.b_subagent_calls AS steps_subagent_calls,
       z.created_at
FROM (
    -- b_*: the anchor's usage (its stored one; 0 before any anchor) plus each step
    -- checkpoint's after it, up to this row.
    SELECT y.*,
        CASE WHEN y.anchor THEN y.s_llm_calls ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_llm_calls) OVER g ELSE 0 END
            + sum(y.u_llm_calls) OVER g END AS b_llm_calls,
        CASE WHEN y.anchor THEN y.s_tool_calls ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_tool_calls) OVER g ELSE 0 END
            + sum(y.u_tool_calls) OVER g END AS b_tool_calls,
        CASE WHEN y.anchor THEN y.s_input_tokens ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_input_tokens) OVER g ELSE 0 END
            + sum(y.u_input_tokens) OVER g END AS b_input_tokens,
        CASE WHEN y.anchor THEN y.s_output_tokens ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_output_tokens) OVER g ELSE 0 END
            + sum(y.u_output_tokens) OVER g END AS b_output_tokens,
        CASE WHEN y.anchor THEN y.s_cache_read_tokens ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_cache_read_tokens) OVER g ELSE 0 END
            + sum(y.u_cache_read_tokens) OVER g END AS b_cache_read_tokens,
        CASE WHEN y.anchor THEN y.s_cache_write_tokens ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_cache_write_tokens) OVER g ELSE 0 END
            + sum(y.u_cache_write_tokens) OVER g END AS b_cache_write_tokens,
        CASE WHEN y.anchor THEN y.s_reasoning_tokens ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_reasoning_tokens) OVER g ELSE 0 END
            + sum(y.u_reasoning_tokens) OVER g END AS b_reasoning_tokens,
        CASE WHEN y.anchor THEN y.s_subagent_calls ELSE
            CASE WHEN y.grp > 0 THEN first_value(y.s_subagent_calls) OVER g ELSE 0 END
            + sum(y.u_subagent_calls) OVER g END AS b_subagent_calls
    FROM (
        -- grp: how many anchors up to this row; state_at: the stored row whose state is
        -- in effect (state_ord never decreases along a session); floor: the newest base.
        SELECT x.*,
            count(*) FILTER (WHERE x.anchor) OVER w AS grp,
            max(x.state_ord) OVER w AS state_at,
            max(x.ord) FILTER (WHERE x.kind = 'base') OVER (PARTITION BY x.session_id) AS floor
        FROM (
            SELECT r.session_id, r.ord, r.run_id, r.step, r.kind, r.message_seq, r.stored,
                   r.own_state, r.state_ord, r.created_at, r.anchor,
                   r.s_llm_calls, r.s_tool_calls, r.s_input_tokens, r.s_output_tokens,
                   r.s_cache_read_tokens, r.s_cache_write_tokens, r.s_reasoning_tokens,
                   r.s_subagent_calls,
                   -- u_*: a step checkpoint's own usage (a row that stores none);
                   -- h_*: a head's (its step's llm usage)
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.llm_calls ELSE 0 END AS u_llm_calls,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.tool_calls ELSE 0 END AS u_tool_calls,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.input_tokens ELSE 0 END AS u_input_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.output_tokens ELSE 0 END AS u_output_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.cache_read_tokens ELSE 0 END AS u_cache_read_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.cache_write_tokens ELSE 0 END AS u_cache_write_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.reasoning_tokens ELSE 0 END AS u_reasoning_tokens,
                   CASE WHEN r.kind = 'step' AND r.s_llm_calls IS NULL
                        THEN u.subagent_calls ELSE 0 END AS u_subagent_calls,
                   CASE WHEN r.kind = 'head' THEN u.h_llm_calls ELSE 0 END AS h_llm_calls,
                   0 AS h_tool_calls,
                   CASE WHEN r.kind = 'head' THEN u.h_input_tokens ELSE 0 END AS h_input_tokens,
                   CASE WHEN r.kind = 'head' THEN u.h_output_tokens ELSE 0 END AS h_output_tokens,
                   CASE WHEN r.kind = 'head' THEN u.h_cache_read_tokens ELSE 0 END
                       AS h_cache_read_tokens,
                   CASE WHEN r.kind = 'head' THEN u.h_cache_write_tokens ELSE 0 END
                       AS h_cache_write_tokens,
                   CASE WHEN r.kind = 'head' THEN u.h_reasoning_tokens ELSE 0 END
                       AS h_reasoning_tokens,
                   0 AS h_subagent_calls
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
                      WHERE m.step > rr.derived_after AND m.step <= rr.committed_step
                      GROUP BY m.session_id, m.run_id, m.step) d
                WHERE NOT EXISTS (SELECT 1 FROM helix.checkpoints s
                                  WHERE s.session_id = d.session_id AND s.run_id = d.run_id
                                    AND s.step = d.step AND s.kind IN ('step', 'base'))
            ) r
            LEFT JOIN LATERAL (
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
                           AS reasoning_tokens,
                       count(*) FILTER (WHERE v.kind = 'llm') AS h_llm_calls,
                       COALESCE(sum(v.input_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                           AS h_input_tokens,
                       COALESCE(sum(v.output_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                           AS h_output_tokens,
                       COALESCE(sum(v.cache_read_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                           AS h_cache_read_tokens,
                       COALESCE(sum(v.cache_write_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                           AS h_cache_write_tokens,
                       COALESCE(sum(v.reasoning_tokens) FILTER (WHERE v.kind = 'llm'), 0)
                           AS h_reasoning_tokens
                FROM helix.usage v
                WHERE v.run_id = r.run_id AND v.step = r.step AND r.s_llm_calls IS NULL
                  AND r.kind IN ('step', 'head')
            ) u ON true
        ) x
        WINDOW w AS (PARTITION BY x.session_id ORDER BY x.ord ROWS UNBOUNDED PRECEDING)
    ) y
    WINDOW g AS (PARTITION BY y.session_id, y.grp ORDER BY y.ord ROWS UNBOUNDED PRECEDING)
) z;
COMMENT ON VIEW helix.checkpoint_timeline IS
    'Every checkpoint, stored and derived, with prune''s columns; query helix.session_checkpoints';

-- Each checkpoint with its id and the state in effect, as migration 0013's view: the
-- same columns, derived rows among the stored ones.
CREATE OR REPLACE VIEW helix.session_checkpoints AS
SELECT t.session_id, t.ord,
       CASE t.kind WHEN 'fork' THEN t.session_id || ':fork'
                   WHEN 'head' THEN t.run_id || ':' || t.step || ':head'
                   ELSE t.run_id || ':' || t.step END AS checkpoint_id,
       t.run_id, t.step, t.kind, t.message_seq, t.state,
       CAST(t.llm_calls AS integer) AS llm_calls, CAST(t.tool_calls AS integer) AS tool_calls,
       CAST(t.input_tokens AS bigint) AS input_tokens,
       CAST(t.output_tokens AS bigint) AS output_tokens,
       CAST(t.cache_read_tokens AS bigint) AS cache_read_tokens,
       CAST(t.cache_write_tokens AS bigint) AS cache_write_tokens,
       CAST(t.reasoning_tokens AS bigint) AS reasoning_tokens,
       CAST(t.subagent_calls AS integer) AS subagent_calls, t.created_at
FROM helix.checkpoint_timeline t
WHERE t.listed;
COMMENT ON VIEW helix.session_checkpoints IS
    'Every checkpoint of each session (stored in helix.checkpoints or derived from its step''s messages), with its id, the state in effect and the usage so far';
