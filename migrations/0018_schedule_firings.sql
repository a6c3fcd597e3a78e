-- Scheduled agents (issue 34): one row per firing of a helix schedule (a DBOS schedule
-- whose workflow is `helix.scheduled_firing`), written by the firing's workflow once it
-- has opened its run (or stored its message on a busy session). Keyed by the firing's
-- DBOS workflow id (`sched-<schedule>-<time>`), which DBOS makes once per firing across
-- every process, so a table scan answers "which run did each firing make".
-- `outcome`: started (its run opened) | queued (stored behind the session's live run;
-- `run_id` is the run it will start) | rejected (the session was busy and the schedule's
-- strategy is `reject`: no run).
CREATE TABLE IF NOT EXISTS helix.schedule_firings (
    firing_id      text PRIMARY KEY,
    schedule_name  text NOT NULL,
    scheduled_at   timestamptz NOT NULL,
    agent_name     text NOT NULL,
    session_id     text NOT NULL,
    run_id         text,
    message_id     text,
    outcome        text NOT NULL CHECK (outcome IN ('started', 'queued', 'rejected')),
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS schedule_firings_schedule_idx
    ON helix.schedule_firings (schedule_name, scheduled_at DESC);
