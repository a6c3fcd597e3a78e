"""The tables of features beside a run's core rows: companions, MCP tool lists, model rate
limits, handoffs, queued messages (double texting), remote children, run versions,
workers, history summaries (context compaction) and the blobs of content parts (images,
documents). Each module owns its table's statements.
"""
