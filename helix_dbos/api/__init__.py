"""The wire models: what the HTTP API, the client and the protocols carry.

Runs, sessions, pending calls and usage (`runs`), checkpoints (`checkpoints`), schedules
(`schedules`) and the request and response bodies of every route (`models`). A leaf:
pydantic and the pure `orchestration` types only, so `helix_dbos.client` loads no
server, DBOS or database code. The server and the runtime import these; nothing here
imports them.
"""
