-- Context compaction (issue 49): summaries of a session's older messages, made by a
-- `helix.summary` step when an agent's history policy summarises (`Summarize`). A summary
-- stands for the session's messages up to `covers_through_seq`; only the model's input
-- is compacted, `helix.messages` keeps the whole transcript. The key makes the write
-- exactly once: a summary step run again (a crash between its insert and its checkpoint)
-- inserts nothing and reads the row the first attempt wrote, so every later step sees
-- the same text. `covers_messages` is how many messages the session held up to that seq
-- when it was made: a summary whose count no longer matches (a run rolled back since)
-- is not used. A fork (time travel) is a new session and starts without summaries.
CREATE TABLE IF NOT EXISTS helix.summaries (
    session_id          text NOT NULL REFERENCES helix.sessions(session_id) ON DELETE CASCADE,
    covers_through_seq  integer NOT NULL,
    covers_messages     integer NOT NULL,
    text                text NOT NULL,
    model               text,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    run_id              text,
    step                integer,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, covers_through_seq)
);
