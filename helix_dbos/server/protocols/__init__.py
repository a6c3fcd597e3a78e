"""The ecosystem's protocols as thin mappings over helix's durable runs.

One module per protocol (AG-UI, the Vercel AI SDK UI message stream, A2A, MCP): each
translates a protocol request into `HelixDBOS` calls and helix's stream chunks into the
protocol's events, so a reconnect, a worker's death or a day-long approval behaves as it
does on helix's own routes.
"""
