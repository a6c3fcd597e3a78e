"""Scheduled agents, one feature in one package: schedules and their firings in DBOS's schedule
table and `helix.schedule_firings` (`book.py`), the workflow each firing runs (`firing.py`)
and the methods `HelixDBOS` offers (`methods.py`). Their wire models stay in
`definitions/schedule.py`, which the client reads.
"""
