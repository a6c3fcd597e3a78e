-- The fleet: one row per helix process (executor), heartbeating on its own connection.
-- A live row whose heartbeat is older than its lease is dead; one live worker of the same
-- application version claims it (state -> 'dead', recovered_by) and hands its pending
-- workflows back to DBOS's queues, routed to workers that serve each run's agent.

CREATE TABLE IF NOT EXISTS helix.workers (
    executor_id         text PRIMARY KEY,
    application_name    text NOT NULL,
    application_version text NOT NULL,
    host                text NOT NULL,
    pid                 integer NOT NULL,
    agents              text[] NOT NULL DEFAULT '{}',
    executes_runs       boolean NOT NULL DEFAULT true,
    state               text NOT NULL DEFAULT 'live',    -- live | stopped | dead
    lease_seconds       double precision NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT now(),
    heartbeat_at        timestamptz NOT NULL DEFAULT now(),
    recovered_by        text,
    recovered_at        timestamptz,
    recovered_runs      integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS workers_live_idx ON helix.workers (application_name, application_version, heartbeat_at)
    WHERE state IN ('live', 'stopped');

-- Which worker executes a run, and whether it waits on a queue: DBOS's own row, read at
-- query time (the dbos schema may not exist yet when helix migrates a new database).
CREATE OR REPLACE FUNCTION helix.run_worker(workflow_id text,
    OUT executor_id text, OUT workflow_status text, OUT queue_name text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF to_regclass('dbos.workflow_status') IS NULL THEN
        RETURN;
    END IF;
    EXECUTE 'SELECT executor_id, status, queue_name FROM dbos.workflow_status
             WHERE workflow_uuid = $1'
        INTO executor_id, workflow_status, queue_name USING workflow_id;
END $$;
