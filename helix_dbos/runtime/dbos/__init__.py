"""The one door to DBOS's private state: `dbos_internals.py` is the only module of helix_dbos
that imports `dbos._*` (pyproject's ruff ban and tests/test_architecture.py hold it), so a
DBOS upgrade is read here first.
"""
