-- A live worker still serves its version when it heartbeats slowly (0019 refined).
--
-- 0019 counted a worker as live only while its last heartbeat was younger than two
-- heartbeats and half a second, with today's heartbeat period (a fifth of the lease, at
-- most a second): 2.5 s with the default 15 s lease. Two kinds of live workers fell out
-- of that window, and an answer to one of their runs was refused with
-- `RunOnOtherVersionError` (HTTP 409) although the worker would have taken it:
--
-- - a worker of a build before 2026-11-26, which heartbeats every fifth of its lease
--   with no one-second cap (every 3 s by default): it looked dead half a second in every
--   three. That is the worker docs/upgrading.md tells users to start for a stranded
--   run of such a build (`test_upgrade_from_older` failed so about one time in six);
-- - a worker starved of CPU for a few seconds.
--
-- So a worker now counts while its last heartbeat is younger than two fifths of its lease
-- and half a second (6.5 s by default; never more than the lease), or while its
-- heartbeat connection is open on the server (`pg_stat_activity`, by the connection's
-- application name, as `store/features/workers` tells a dead worker) and its lease has
-- not lapsed. A killed worker's connection closes with its process, so it stops counting
-- at most 6.5 s after its last heartbeat (2.5 s before).
CREATE OR REPLACE FUNCTION helix.worker_heartbeats(w helix.workers) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT w.executes_runs AND w.state = 'live'
       AND (w.heartbeat_at >= now() - make_interval(secs => LEAST(w.lease_seconds,
                2 * GREATEST(w.lease_seconds / 5, 0.05) + 0.5))
            OR (w.heartbeat_at >= now() - make_interval(secs => w.lease_seconds)
                AND EXISTS (SELECT 1 FROM pg_stat_activity a
                            WHERE a.datname = current_database()
                              AND a.application_name = 'helix-hb:' || md5(w.executor_id))))
$$;
