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
