"""A run waiting for someone: approvals, client results and human input (`hitl.py`),
re-checking messages that arrived while it waited, sending an answer to a waiting run, and
refusing answers to runs of another version.
"""
