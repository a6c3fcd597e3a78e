-- A live worker that is slow to heartbeat still serves its version (0019 refined).
--
-- 0019 counted a worker as live only while its last heartbeat was younger than two
-- heartbeats and half a second (2.5 s with the default 15 s lease). A worker starved of
-- CPU for that long (a loaded box, a long GIL hold while it recovers runs) lost its
-- version for that moment: an answer to one of its runs was refused with
-- `RunOnOtherVersionError` (HTTP 409) although the worker was alive and would take it.
--
-- A worker now also counts while its heartbeat connection is open on the server
-- (`pg_stat_activity`, by the connection's application name, as `store/features/workers`
-- tells a dead worker) and its lease has not lapsed: the same signs that keep another
-- worker from claiming its runs. A killed worker's connection closes with its process,
-- so it stops counting after two heartbeats, as before. Behind a transaction pooler the
-- connection is not seen and the short window alone applies, as before.
CREATE OR REPLACE FUNCTION helix.worker_heartbeats(w helix.workers) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT w.executes_runs AND w.state = 'live'
       AND (w.heartbeat_at >= now() - make_interval(secs => LEAST(w.lease_seconds,
                2 * GREATEST(LEAST(w.lease_seconds / 5, 1.0), 0.05) + 0.5))
            OR (w.heartbeat_at >= now() - make_interval(secs => w.lease_seconds)
                AND EXISTS (SELECT 1 FROM pg_stat_activity a
                            WHERE a.datname = current_database()
                              AND a.application_name = 'helix-hb:' || md5(w.executor_id))))
$$;
