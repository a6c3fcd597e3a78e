"""The durable building blocks of a run's steps: what a step returns (`step_types.py`), how it
commits its rows and chunks (`commit.py`, `live_chunks.py`), one tool call (`tool_step.py`),
spans and run traces, closing a run, and the results a finished run reads back.
"""
