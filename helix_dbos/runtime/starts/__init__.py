"""Starting workflows: `dispatch.py` enqueues or starts a run's workflow, `run_starts.py` opens
and starts runs for callers, and `run_waits.py` waits for their results.
"""
