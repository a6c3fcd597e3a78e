"""A2A's wire (the `a2a-sdk` package, extra `a2a`): helix runs as A2A tasks and messages
(`mapping.py`), and A2A agents as remote sub-agents (`remote.py`, the transport the facade
hands to the runtime). The A2A routes are in `server/protocols/a2a/`.
"""
