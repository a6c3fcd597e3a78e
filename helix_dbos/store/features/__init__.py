"""The tables of features beside a run's core rows: companions, MCP tool lists, model rate
limits, handoffs, queued messages (double texting), remote children, run versions,
workers and history summaries (context compaction). Each module owns its table's statements.
"""
