-- Keys that let an agent step commit its rows exactly once without a DBOS datasource
-- transaction of its own (the rows of step N are written at the start of step N+1's LLM
-- step, guarded by runs.committed_step), and a per-session message counter so that
-- sequence numbers are allocated under the session's row lock, like chunk_seq.

ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS committed_step integer NOT NULL DEFAULT 0;
UPDATE helix.runs SET committed_step = step_count;

ALTER TABLE helix.sessions ADD COLUMN IF NOT EXISTS message_seq integer NOT NULL DEFAULT 0;
UPDATE helix.sessions s SET message_seq = m.last_seq
FROM (SELECT session_id, max(seq) AS last_seq FROM helix.messages GROUP BY session_id) m
WHERE m.session_id = s.session_id;
