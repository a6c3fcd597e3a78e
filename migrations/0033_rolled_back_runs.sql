-- A run's first read counts its session's rolled-back runs (`store/repository.py`,
-- `_ROLLBACKS`): a process that cached the session's transcript when there were fewer
-- reads it whole again, since a rollback removed messages it may still hold (issue 48's
-- history cache). This index holds only rolled-back runs, so the count is one probe
-- whatever the session's length, and a step's update of its run row never touches it.
CREATE INDEX IF NOT EXISTS runs_rolled_back_idx ON helix.runs (session_id)
    WHERE rolled_back_at IS NOT NULL;
