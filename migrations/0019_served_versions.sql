-- Upgrades (issue 45): whether a run of an application version will be resumed. DBOS
-- recovers a workflow only in a process of the version that started it, so an answer to a
-- run of a version that no live worker runs, while workers of other versions do (an
-- upgrade changed the version), would be accepted and never taken: `approve()` and the
-- other answers refuse it instead (`RunOnOtherVersionError`). With no live worker at all
-- (a restart, a fleet that is down) every version counts as served: the answer is kept
-- for the worker that comes back, as before. NULL (no version recorded) is served too.

-- A live worker executes runs and heartbeats: it renewed its lease within two heartbeats
-- and half a second (`store/workers.heartbeat_seconds`), so a worker killed a moment ago
-- does not count while its lease runs out.
CREATE OR REPLACE FUNCTION helix.worker_heartbeats(w helix.workers) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT w.executes_runs AND w.state = 'live'
       AND w.heartbeat_at >= now() - make_interval(secs => LEAST(w.lease_seconds,
               2 * GREATEST(LEAST(w.lease_seconds / 5, 1.0), 0.05) + 0.5))
$$;

CREATE OR REPLACE FUNCTION helix.version_served(version text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT version IS NULL
        OR EXISTS (SELECT 1 FROM helix.workers w
                   WHERE w.application_version = version AND helix.worker_heartbeats(w))
        OR NOT EXISTS (SELECT 1 FROM helix.workers w WHERE helix.worker_heartbeats(w))
$$;

-- The application version that started a run's workflow (DBOS's row; NULL while the dbos
-- schema does not exist yet, as for `helix.run_worker`).
CREATE OR REPLACE FUNCTION helix.run_version(workflow_id text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    version text;
BEGIN
    IF to_regclass('dbos.workflow_status') IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE 'SELECT application_version FROM dbos.workflow_status WHERE workflow_uuid = $1'
        INTO version USING workflow_id;
    RETURN version;
END $$;
