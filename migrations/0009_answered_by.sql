-- Who answered a pending tool call, beside when (answered_at): the inbox sends the name
-- its user signed in with, the CLI sends user@host (cli), HTTP clients may send
-- `answered_by`; NULL for answers through the Python API or a raw DBOS.send.
ALTER TABLE helix.tool_calls ADD COLUMN IF NOT EXISTS answered_by text;
COMMENT ON COLUMN helix.tool_calls.answered_by IS
    'who answered: the inbox user, user@host (cli), an HTTP client''s answered_by; NULL for the Python API or a raw DBOS.send';
