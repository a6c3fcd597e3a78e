"""Context compaction (issue 49): what part of a session's transcript the model is shown,
as pure functions over messages. The policies and the token estimate (`policy.py`), where
a transcript may be cut without splitting a tool call from its result (`cuts.py`), the
compaction itself (`compaction.py`) and the request that asks for a summary
(`summary_prompt.py`). No I/O: the runtime reads summaries and asks for them."""
