"""The HTTP plumbing every route and protocol shares: authentication and cookies, body and edge
limits, error responses, the route context, visibility checks, keyed starts, server-sent
events and downloads of stored content parts.
"""
