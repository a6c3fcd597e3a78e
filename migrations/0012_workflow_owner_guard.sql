-- A fenced worker's late write cannot land: every write a workflow execution makes to a
-- run's rows (a step's rows, its head, the final write) calls this in the same statement
-- with the execution's DBOS ownership token. A worker whose lease was claimed lost its
-- workflows' tokens (the hand-back clears them, the next owner writes its own), so its
-- statement raises HX001 and rolls back whole. NULL (a write from outside a workflow: an
-- abort, a reconcile) checks nothing.
CREATE OR REPLACE FUNCTION helix.owns(workflow_id text, owner_xid text)
RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF owner_xid IS NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM dbos.workflow_status ws
               WHERE ws.workflow_uuid = owns.workflow_id
                 AND ws.owner_xid = owns.owner_xid) THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'workflow % is no longer owned by this execution', workflow_id
        USING ERRCODE = 'HX001';
END $$;
