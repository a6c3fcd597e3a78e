"""Memory on a server without pgvector, in a process of its own (DBOS launches once per
process). usage: memory_fallback_app.py DATABASE_URL; prints one JSON line of findings."""

from __future__ import annotations

import asyncio
import json
import sys

from helix_dbos import HelixDBOS
from helix_dbos.memory import VectorSearchUnavailableError

helix = HelixDBOS(database_url=sys.argv[1], application_version="memory-fallback")
helix.launch()


async def main() -> dict[str, object]:
    memory = helix.memory
    support = await memory.ensure()
    saved = await memory.save("Ines collects vintage typewriters", resource_id="ines")
    text = await memory.search("typewriters", resource_id="ines", mode="text")
    hybrid = await memory.search("vintage typewriter", resource_id="ines")
    found: dict[str, object] = {
        "available": support.available,
        "status": saved.embedding_status,
        "text": [h.memory.memory_id for h in text] == [saved.memory_id],
        "hybrid": [h.memory.memory_id for h in hybrid] == [saved.memory_id],
    }
    for name, call in (
        ("vector_error", memory.search("typewriters", resource_id="ines", mode="vector")),
        ("process_error", memory.process_unembedded()),
    ):
        try:
            await call
            found[name] = None
        except VectorSearchUnavailableError as exc:
            found[name] = str(exc)
    return found


print(json.dumps(asyncio.run(main())), flush=True)
helix.shutdown()
