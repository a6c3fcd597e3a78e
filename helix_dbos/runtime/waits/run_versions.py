"""Refuse to act on a run that no process will resume (docs/upgrading.md).

An answer or an interrupt is a DBOS message: accepted by the database whether or not a
process will ever run the workflow that receives it. A run started by an application
version that no live worker runs waits forever, so `approve()`, `deny()`,
`submit_tool_result()`, `submit_human_input()` and `interrupt()` refuse it with
`RunOnOtherVersionError` (HTTP 409) before anything is sent. The usual answer checks this
inside its one claiming statement (`store/answer_claim.py`); the other paths ask here.
"""

from __future__ import annotations

from dbos import DBOS
from sqlalchemy import text

from helix_dbos.errors import RunOnOtherVersionError
from helix_dbos.store.features.run_versions import SERVED_VERSIONS
from helix_dbos.store.repository import SQLConnection


async def refuse_unserved(
    conn: SQLConnection, run_id: str, workflow_id: str, mine: str | None
) -> None:
    """Raise `RunOnOtherVersionError` if no live worker runs the run's version. The
    version is DBOS's (its system database may be another database than helix's);
    `mine`, the version this process executes runs of (if it does), is served."""
    status = await DBOS.get_workflow_status_async(workflow_id)
    version = status.app_version if status is not None else None
    if version is None or version == mine:
        return
    served = await conn.execute(text("SELECT helix.version_served(:v)"), {"v": version})
    if served.scalar_one():
        return
    versions = [row[0] for row in (await conn.execute(text(SERVED_VERSIONS))).all()]
    raise RunOnOtherVersionError(run_id, version, versions)
