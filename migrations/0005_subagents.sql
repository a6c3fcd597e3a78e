-- Sub-agents (seed 002): a child session knows its parent and its root, and the root's
-- stream carries its descendants' chunks, tagged with their own session, run and agent.
--
-- sessions.root_session_id: NULL for a root session; the root of the tree otherwise.
-- stream_chunks.source_session_id: NULL for a session's own chunk; on a copy in the root's
-- stream, the descendant session the chunk happened in (run_id and agent_name are that
-- session's too). stream_chunks.via_run_id: the root's run that the copy reached, so a
-- reader of that run sees its children live.

ALTER TABLE helix.sessions ADD COLUMN IF NOT EXISTS root_session_id text;
CREATE INDEX IF NOT EXISTS sessions_root_idx ON helix.sessions (root_session_id)
    WHERE root_session_id IS NOT NULL;

ALTER TABLE helix.stream_chunks ADD COLUMN IF NOT EXISTS source_session_id text;
ALTER TABLE helix.stream_chunks ADD COLUMN IF NOT EXISTS via_run_id text;
CREATE INDEX IF NOT EXISTS stream_chunks_via_run_idx ON helix.stream_chunks (via_run_id, seq)
    WHERE via_run_id IS NOT NULL;

-- Copies a descendant's chunks into its root's stream, in the same transaction, at the
-- root's next sequence numbers (taken under the root's row lock, like every chunk). The
-- copy's key is the original's with '@root', so a replayed insert, which inserts nothing,
-- copies nothing. Lock order is always descendant row, then root row.
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
               row_number() OVER (PARTITION BY s.root_session_id ORDER BY n.session_id, n.seq) AS ord
        FROM new_rows n JOIN helix.sessions s ON s.session_id = n.session_id
        WHERE n.source_session_id IS NULL AND s.root_session_id IS NOT NULL
    ), counts AS (
        SELECT root, count(*) AS n FROM src GROUP BY root
    ), bumped AS (
        UPDATE helix.sessions r SET chunk_seq = r.chunk_seq + c.n
        FROM counts c WHERE r.session_id = c.root
        RETURNING r.session_id AS root, r.chunk_seq - c.n AS base
    ), ins AS (
        INSERT INTO helix.stream_chunks
            (session_id, seq, chunk_key, run_id, agent_name, step, type, payload, created_at,
             source_session_id, via_run_id)
        SELECT src.root, b.base + src.ord, src.chunk_key || '@root', src.run_id, src.agent_name,
               src.step, src.type, src.payload, src.created_at, src.session_id,
               (SELECT lr.run_id FROM helix.runs lr WHERE lr.session_id = src.root
                  AND lr.status IN ('running', 'waiting', 'paused'))
        FROM src JOIN bumped b ON b.root = src.root
        ON CONFLICT (chunk_key) DO NOTHING
        RETURNING session_id
    )
    SELECT count(pg_notify('helix_chunks', root)) INTO roots
    FROM (SELECT DISTINCT session_id AS root FROM ins) x;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS stream_chunks_to_root ON helix.stream_chunks;
CREATE TRIGGER stream_chunks_to_root AFTER INSERT ON helix.stream_chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION helix.copy_chunks_to_root();

-- Every run waiting for a human, now with the root session of its tree (a child's wait
-- shows under the session the user started).
CREATE OR REPLACE VIEW helix.waiting_runs AS
SELECT r.run_id, r.session_id, r.agent_name, r.workflow_id, r.waiting_for, r.waiting_since,
       t.tool_call_id, t.tool_name, t.kind, t.input, t.deadline_at,
       COALESCE(s.root_session_id, r.session_id) AS root_session_id
FROM helix.runs r
JOIN helix.tool_calls t ON t.run_id = r.run_id AND t.status = 'pending'
JOIN helix.sessions s ON s.session_id = r.session_id
WHERE r.status IN ('waiting', 'paused');
