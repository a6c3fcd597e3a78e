"""Context compaction (issue 49): what part of a session's transcript the model is shown,
as pure functions over messages. The policies (`policy.py`), where a transcript may be cut
without splitting a tool call from its result (`cuts.py`), and the compaction itself
(`compaction.py`). No I/O: the runtime reads summaries and asks for them."""
