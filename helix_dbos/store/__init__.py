"""helix's own tables in PostgreSQL: connections and drivers, migrations, the statement pool,
storable values, and the run's core rows (`repository.py`, `run_bounds.py`, checkpoints,
the call tree, answers and resumes); the tables of features beside them are in
`features/`. SQL only: no DBOS, no workflow code.
"""
