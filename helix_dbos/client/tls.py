"""One TLS context per process for helix's own HTTP clients.

httpx builds a context for each client it creates, and building one reads the CA bundle:
about 30 ms of CPU. A process that opens a client per call (the CLI, a parent calling a
remote agent, a readiness probe) paid that each time; the context is safe to share
between clients and threads.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default context (certifi's CA bundle, or SSL_CERT_FILE / SSL_CERT_DIR as
    they were when it was first asked for), built once."""
    return httpx.create_ssl_context()
