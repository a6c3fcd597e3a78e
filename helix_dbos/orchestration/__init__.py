"""The pure decisions of a run: messages and their types (content parts too), the next
step, planning, completion, terminating tools, double-texting policies and call ids. No I/O
and no other helix folder (tests/test_architecture.py holds it), so every rule here is
tested without a database.
"""
