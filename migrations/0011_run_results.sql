-- A caller's result is read from its run's row (not from DBOS's workflow output), so the
-- row holds all of it:
-- runs.stop_reason: 'stop_when' when the agent's stop condition ended the run; NULL otherwise.
-- runs.output becomes json, which keeps the output's key order as the model and the
-- output schema gave it (jsonb sorts keys); json operators (->, ->>) work as before.
ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS stop_reason text;
COMMENT ON COLUMN helix.runs.stop_reason IS
    'stop_when when the agent''s stop condition ended the run; NULL otherwise';
ALTER TABLE helix.runs ALTER COLUMN output TYPE json USING output::json;
