"""Runs as DBOS workflows, one concern per folder, each importing only the ones listed before
it: `dbos` (DBOS's private state), `process` (one worker process), `steps` (the durable
building blocks of a step), `waits` (runs waiting for someone), `sessions` (a session's
runs), `children` (runs started by runs), `loop` (the agent loop), `starts` (starting
workflows), `control` (acting on runs from outside), and `worker_process.py`, which
launches them all.
"""
