"""helix's own HTTP routes, one module per resource: runs (`run_routes.py`), sessions,
checkpoints, reads, schedules and the chat endpoint.
"""
