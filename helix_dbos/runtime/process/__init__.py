"""One worker process's state: the `Runtime` every step reads (`process_runtime.py`), the event
loop bridge, idle-connection pool, outage detection, parked waits, the worker rows and
leases, model rate limits, the named step-sequence patches and the wake-ups (NOTIFY)
sent after commits. Nothing here knows what an
agent run is.
"""
