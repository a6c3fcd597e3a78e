-- The head of an agent step (the model's message and its LLM usage) can be written before
-- the rest of the step: before the run waits for a human, or while a slow tool runs, so
-- the transcript shows what the model asked for. runs.committed_head is its key: a head
-- is written once, and the step's full write skips a head already written.

ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS committed_head integer NOT NULL DEFAULT 0;
UPDATE helix.runs SET committed_head = committed_step;
