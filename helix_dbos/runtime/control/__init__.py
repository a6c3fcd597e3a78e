"""Acting on runs from outside: interrupt, abort, resume, answer and roll back
(`run_control.py`), and time travel to a checkpoint (`time_travel.py`).
"""
