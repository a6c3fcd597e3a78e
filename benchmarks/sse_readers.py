"""The SSE readers of bench_streaming.py's throughput run, in a process of their own
(several such processes, so the clients are not the bottleneck): lean clients, standard
library only, so the process starts at once.

usage: python sse_readers.py BASE_URL SESSION_ID RUN_ID READERS
Prints `attached` once every reader has its first chunk, then one JSON line of figures.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import re
import resource
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime

GO_TIMEOUT_S = 120.0

EVENT = re.compile(rb"id: (\d+)\nevent: (\w+)\ndata: ([^\n]*)\n\n")
TIMESTAMP = re.compile(rb'"timestamp":"([^"]+)"')


@dataclass
class RawReader:
    """One lean SSE client: what arrived, when (epoch s), parsed only after the run, so
    the client's work during the run is a recv() and an append per TCP read."""

    blocks: list[tuple[float, bytes]] = field(default_factory=list)
    attached: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, host: str, port: int, path: str) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        # HTTP/1.0: no chunked framing, the body is the event stream itself
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        tail = b""
        while True:
            data = await reader.read(262144)
            if not data:
                break
            self.blocks.append((time.time(), data))
            if not self.attached.is_set() and b"run_started" in tail + data:
                self.attached.set()
            if b"event: end\n" in tail + data:
                break
            tail = data[-32:]
        writer.close()

    def events(self) -> list[tuple[str, float, float]]:
        """(type, created_at epoch s, arrived epoch s) of every chunk event."""
        body = b"".join(data for _, data in self.blocks)
        ends, offset = [], 0
        for _, data in self.blocks:
            offset += len(data)
            ends.append(offset)
        out = []
        for match in EVENT.finditer(body):
            arrived = self.blocks[bisect.bisect_left(ends, match.end())][0]
            stamp = TIMESTAMP.search(match.group(3))
            assert stamp is not None
            created = datetime.fromisoformat(stamp.group(1).decode()).timestamp()
            out.append((match.group(2).decode(), created, arrived))
        return out


async def main(base: str, session_id: str, run_id: str, readers: int) -> None:
    """One child process of the SSE throughput run: `readers` lean SSE clients. Prints
    `attached` once every client has its first chunk, then one JSON line of figures."""
    host, port = base.removeprefix("http://").split(":")
    path = f"/sse?session_id={session_id}&run_id={run_id}"
    group = [RawReader() for _ in range(readers)]
    tasks = [asyncio.create_task(r.read(host, int(port), path)) for r in group]
    await asyncio.wait_for(asyncio.gather(*(r.attached.wait() for r in group)), GO_TIMEOUT_S)
    print("attached", flush=True)
    await asyncio.wait_for(asyncio.gather(*tasks), 300)
    during = resource.getrusage(resource.RUSAGE_SELF)
    per_reader = [r.events() for r in group]
    figures = {
        "counts": sorted({len(events) for events in per_reader}),
        "custom_events": sum(1 for kind, _, _ in per_reader[0] if kind == "custom"),
        "finished_wall": max(r.blocks[-1][0] for r in group),
        "latencies_ms": [
            round((arrived - created) * 1000, 2)
            for events in per_reader
            for _, created, arrived in events[1:]
        ],
        "cpu_s": during.ru_utime + during.ru_stime,
    }
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    base_url, session, run, count = sys.argv[1:5]
    asyncio.run(main(base_url, session, run, int(count)))
