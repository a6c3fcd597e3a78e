"""The one door to DBOS's private state and to its tables: `dbos_internals.py` and
`step_bookkeeping.py` (DBOS's check and record of a step, one statement each) are the only
modules of helix_dbos that import `dbos._*` (pyproject's ruff ban and
tests/test_architecture.py hold it), and every statement helix sends on DBOS's tables
(`dbos.workflow_status`, `dbos.notifications`, ...) is in this folder
(`dbos_tables.py`, `worker_workflows.py`, `answer_message.py`; tests/test_dbos_tables.py
holds it), so a DBOS upgrade is read here first, with the migrations' functions that
read DBOS's tables (`helix.owns`, `helix.run_worker`, `helix.run_version`,
`helix.unreceived_interrupts`, `helix.end_step_and_run`).
"""
