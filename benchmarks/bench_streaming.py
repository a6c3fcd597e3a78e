"""Stream latency and fan-out: from a text delta in the LLM step to a reader, and
chunk throughput with many concurrent readers.

One process, one fresh database, two measurements:

1. Latency: an LLM adapter produces text pieces 60 ms apart (`on_text_delta`), so
   each piece is one `text_delta` chunk (the runtime coalesces to one write per
   50 ms). Per piece: from just before `on_text_delta(piece)` to a reader having
   the chunk, through `helix.stream` in this process and through the HTTP SSE
   endpoint (`create_app`, uvicorn on 127.0.0.1 in a thread, an httpx client).
2. Throughput: one run whose tool emits `--events` custom events per step for
   `--bursts` steps, read by `--readers` concurrent readers (in-process
   `helix.stream` tasks, then SSE clients in a child process), against the same run
   with no reader.
   Chunks/s delivered across readers, and delivery latency per chunk: from the
   writing transaction's `now()` (the chunk's `created_at`) to the reader.

usage: .venv/bin/python benchmarks/bench_streaming.py [--readers N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from bench_agent_loop import fresh_database, server_url
from bench_common import cpu_seconds, percentile, profiled, rounded

import helix_dbos
from helix_dbos import Agent, HelixDBOS, ToolContext, tool
from helix_dbos.orchestration.types import (
    LLMRequest,
    StepResult,
    TextStepResult,
    ToolCall,
    ToolCallsStepResult,
)
from helix_dbos.server import create_app
from helix_dbos.store.database import redact_url

TALKER, BURSTER = "bench_talker", "bench_burster"
PIECE = re.compile(r"<(\d+)>")
GO_TIMEOUT_S = 120.0


@tool
async def burst(n: int, ctx: ToolContext) -> str:
    """Emits n custom events."""
    for i in range(n):
        await ctx.emit("tick", {"i": i})
    return "ok"


class BenchLLM:
    """The model for both agents. Waits for `go` (readers attached) before its first
    step; the talker streams paced pieces, the burster calls `burst` `bursts` times."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.pieces = 20
        self.gap_s = 0.06
        self.bursts = 10
        self.events = 100
        self.produced: dict[int, float] = {}  # piece -> perf_counter just before on_text_delta

    def arm(self) -> None:
        self.go.clear()
        self.produced = {}

    async def generate_step(
        self,
        request: LLMRequest,
        on_text_delta: Callable[[str], Awaitable[None]] | None = None,
    ) -> StepResult:
        last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
        done = sum(1 for m in request.messages[last_user:] if m.role == "assistant")
        if done == 0:
            await asyncio.wait_for(self.go.wait(), GO_TIMEOUT_S)
        if request.agent_name == TALKER:
            parts: list[str] = []
            for i in range(self.pieces):
                if i:
                    await asyncio.sleep(self.gap_s)
                piece = f"<{i}>"
                parts.append(piece)
                if on_text_delta is not None:
                    self.produced[i] = time.perf_counter()
                    await on_text_delta(piece)
            return TextStepResult(content="".join(parts), stop_reason="end_turn")
        if done < self.bursts:
            call = ToolCall(id=f"b{done}", name="burst", arguments={"n": self.events})
            return ToolCallsStepResult(tool_calls=[call], stop_reason="tool_use")
        return TextStepResult(content="done", stop_reason="end_turn")


# --- readers ---------------------------------------------------------------------------


@dataclass
class Reader:
    """What one reader received: (type, payload, created_at epoch s, perf_counter, epoch s)."""

    got: list[tuple[str, dict[str, Any], float, float, float]] = field(default_factory=list)
    attached: asyncio.Event = field(default_factory=asyncio.Event)
    finished_at: float = 0.0  # perf_counter (then: seconds after go)
    finished_wall: float = 0.0  # epoch seconds

    def on_chunk(self, kind: str, payload: dict[str, Any], created: float) -> None:
        self.got.append((kind, payload, created, time.perf_counter(), time.time()))
        self.attached.set()


async def read_in_process(helix: HelixDBOS, session_id: str, run_id: str, reader: Reader) -> None:
    async for chunk in helix.stream(session_id, run_id=run_id):
        reader.on_chunk(chunk.type, chunk.payload, chunk.timestamp.timestamp())
    reader.finished_at, reader.finished_wall = time.perf_counter(), time.time()


async def read_sse(client: Any, base: str, session_id: str, run_id: str, reader: Reader) -> None:
    params = {"session_id": session_id, "run_id": run_id}
    async with client.stream("GET", f"{base}/sse", params=params) as response:
        response.raise_for_status()
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                if event == "end":
                    break
                if event == "error":
                    raise RuntimeError(f"SSE stream failed: {line}")
                chunk = json.loads(line[5:])
                created = datetime.fromisoformat(chunk["timestamp"]).timestamp()
                reader.on_chunk(chunk["type"], chunk["payload"], created)
    reader.finished_at, reader.finished_wall = time.perf_counter(), time.time()


def delivery_figures(group: list[Reader]) -> dict[str, Any]:
    """Chunk counts and delivery latency (writing transaction's now() -> reader) of a group."""
    counts = sorted({len(r.got) for r in group})
    lat = [(wall - created) * 1000 for r in group for _, _, created, _, wall in r.got[1:]]
    return {
        "counts": counts,
        "custom_events": sum(1 for kind, *_ in group[0].got if kind == "custom"),
        "finished_wall": max(r.finished_wall for r in group),
        "latency_p50_ms": percentile(lat, 50),
        "latency_p99_ms": percentile(lat, 99),
        "latency_max_ms": max(lat),
    }


class SSEServer:
    """`create_app(helix)` under uvicorn on 127.0.0.1 (free port) in its own thread.

    DBOS was launched on the benchmark's loop, so the app's lifespan does not launch
    it again and the server's helix calls hop to that loop."""

    def __init__(self, helix: HelixDBOS) -> None:
        # as many streams of one session as the benchmark has readers (the default caps 16)
        app = create_app(helix, allow_unauthenticated=True, max_streams_per_session=1000)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        port = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    async def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self.server.should_exit = True
        await asyncio.to_thread(self.thread.join, 15)
        self.sock.close()


# --- the measurements -----------------------------------------------------------------------


class Bench:
    def __init__(self, helix: HelixDBOS, llm: BenchLLM, sse: SSEServer | None) -> None:
        self.helix = helix
        self.llm = llm
        self.sse = sse
        self.client: Any = None
        self.client_processes = 4
        if sse is not None:
            limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
            self.client = httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=limits)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def one_run(self, agent: str, readers: int, via: str) -> tuple[list[Reader], float]:
        """Start a run of `agent`, attach `readers` readers `via` "inproc" | "sse", let the
        model go once all are attached; returns the readers and the producer's seconds
        (go -> run's final status)."""
        self.llm.arm()
        handle = await self.helix.execute(agent, "go")
        sid, rid = handle.session_id, handle.run_id
        group = [Reader() for _ in range(readers)]
        if via == "sse":
            tasks = [
                asyncio.create_task(read_sse(self.client, self.sse.base, sid, rid, r))  # type: ignore[union-attr]
                for r in group
            ]
        else:
            tasks = [asyncio.create_task(read_in_process(self.helix, sid, rid, r)) for r in group]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(r.attached.wait() for r in group)), GO_TIMEOUT_S
            )
            go = time.perf_counter()
            self.llm.go.set()
            await self.helix.wait_for_run_end(sid, rid)
            producer_s = time.perf_counter() - go
            await asyncio.wait_for(asyncio.gather(*tasks), 120)
        finally:
            for t in tasks:
                t.cancel()
        result = await handle.result()
        if result.status != "completed":
            raise RuntimeError(f"benchmark run did not complete: {result}")
        for r in group:  # readers' clocks start at go
            r.finished_at -= go
        return group, producer_s

    async def latency(self, via: str) -> list[float]:
        """ms from on_text_delta(piece) to the reader, every piece of one run."""
        (reader,), _ = await self.one_run(TALKER, 1, via)
        produced = self.llm.produced
        out: list[float] = []
        seen: set[int] = set()
        for kind, payload, _, at, _ in reader.got:
            if kind != "text_delta":
                continue
            for match in PIECE.findall(payload.get("delta", "")):
                i = int(match)
                if i not in seen:
                    seen.add(i)
                    out.append((at - produced[i]) * 1000)
        if len(seen) != self.llm.pieces:
            raise RuntimeError(f"reader got {len(seen)} of {self.llm.pieces} pieces")
        return out

    async def throughput(self, readers: int, via: str) -> dict[str, Any]:
        """`readers` readers of one burst run: "inproc" tasks here, or "sse" clients in a
        child process (their HTTP parsing must not share this process's loop and GIL)."""
        cpu0 = cpu_seconds()
        row = await self._throughput(readers, via)
        row["process_cpu_s"] = cpu_seconds() - cpu0
        return row

    async def _throughput(self, readers: int, via: str) -> dict[str, Any]:
        if via == "sse":
            return await self.throughput_sse_process(readers)
        group, producer_s = await self.one_run(BURSTER, readers, via)
        if not group:
            return {"readers": 0, "producer_s": producer_s}
        figures = delivery_figures(group)
        return self._throughput_row(
            readers, via, producer_s, max(r.finished_at for r in group), figures
        )

    async def throughput_sse_process(self, readers: int) -> dict[str, Any]:
        """`readers` lean SSE clients spread over `client_processes` child processes."""
        assert self.sse is not None
        self.llm.arm()
        handle = await self.helix.execute(BURSTER, "go")
        sid, rid = handle.session_id, handle.run_id
        shares = [readers // self.client_processes] * self.client_processes
        for i in range(readers % self.client_processes):
            shares[i] += 1
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(Path(__file__).resolve().parent / "sse_readers.py"),
                self.sse.base,
                sid,
                rid,
                str(share),
                stdout=asyncio.subprocess.PIPE,
                limit=1 << 26,  # its figures are one long JSON line
            )
            for share in shares
            if share
        ]
        parts: list[dict[str, Any]] = []
        try:
            for child in children:
                assert child.stdout is not None
                line = await asyncio.wait_for(child.stdout.readline(), GO_TIMEOUT_S + 15)
                if line.strip() != b"attached":
                    raise RuntimeError(f"SSE client process: {line!r}")
            go, go_wall = time.perf_counter(), time.time()
            self.llm.go.set()
            await self.helix.wait_for_run_end(sid, rid)
            producer_s = time.perf_counter() - go
            for child in children:
                assert child.stdout is not None
                parts.append(json.loads(await asyncio.wait_for(child.stdout.readline(), 300)))
        finally:
            for child in children:
                if child.returncode is None:
                    await asyncio.wait_for(child.wait(), 30)
        result = await handle.result()
        if result.status != "completed":
            raise RuntimeError(f"benchmark run did not complete: {result}")
        lat = [x for part in parts for x in part["latencies_ms"]]
        figures = {
            "counts": sorted({c for part in parts for c in part["counts"]}),
            "custom_events": parts[0]["custom_events"],
            "latency_p50_ms": percentile(lat, 50),
            "latency_p99_ms": percentile(lat, 99),
            "latency_max_ms": max(lat),
        }
        finished = max(part["finished_wall"] for part in parts)
        row = self._throughput_row(readers, "sse", producer_s, finished - go_wall, figures)
        row["client_process_cpu_s"] = sum(part["cpu_s"] for part in parts)
        row["client_processes"] = len(children)
        return row

    @staticmethod
    def _throughput_row(
        readers: int, via: str, producer_s: float, delivered_s: float, figures: dict[str, Any]
    ) -> dict[str, Any]:
        if len(figures["counts"]) != 1:
            raise RuntimeError(f"readers got different chunk counts: {figures['counts']}")
        per_reader = figures["counts"][0]
        delivered = per_reader * readers
        return {
            "readers": readers,
            "via": via,
            "chunks_per_reader": per_reader,
            "custom_events": figures["custom_events"],
            "producer_s": producer_s,
            "all_delivered_s": delivered_s,
            "chunks_delivered": delivered,
            "chunks_per_s": delivered / delivered_s,
            "latency_p50_ms": figures["latency_p50_ms"],
            "latency_p99_ms": figures["latency_p99_ms"],
            "latency_max_ms": figures["latency_max_ms"],
        }


def lat_summary(values: list[float]) -> dict[str, float]:
    return {
        "samples": len(values),
        "p50_ms": statistics.median(values),
        "p90_ms": percentile(values, 90),
        "p99_ms": percentile(values, 99),
        "min_ms": min(values),
        "max_ms": max(values),
    }


async def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    vias = ["inproc"] + (["sse"] if bench.sse is not None else [])
    llm = bench.llm
    llm.pieces, llm.gap_s, llm.bursts, llm.events = args.pieces, args.gap, args.bursts, args.events
    out: dict[str, Any] = {"latency": {}, "throughput": {}}
    # warm-up: every path once
    for via in vias:
        await bench.latency(via)
        await bench.throughput(2, via)
    await bench.throughput(0, "inproc")
    samples: dict[str, list[float]] = {via: [] for via in vias}
    for _ in range(args.repeats):  # alternate the paths, run by run
        for via in vias:
            samples[via].extend(await bench.latency(via))
    for via in vias:
        out["latency"][via] = lat_summary(samples[via])
    print(f"latency done; throughput with {args.readers} readers", flush=True)
    out["throughput"]["none"] = await bench.throughput(0, "inproc")
    for via in vias:
        with profiled(args.pyinstrument, f"throughput-{via}"):
            out["throughput"][via] = await bench.throughput(args.readers, via)
    out["throughput"]["none_after"] = await bench.throughput(0, "inproc")
    return out


def print_report(kind: str, url: str, r: dict[str, Any]) -> None:
    print(f"\nhelix_dbos streaming, database: {kind} ({redact_url(url)})")
    print(f"code measured: {r['code']}")
    print(
        f"cores: {r['cores']}, python {sys.version.split()[0]}; SSE: "
        f"{'measured' if r['sse'] else 'NOT measured (' + r['sse_error'] + ')'}\n"
    )
    a = r["args"]
    print(
        f"1. text delta -> reader, {a['pieces']} pieces {a['gap'] * 1000:.0f} ms apart per run, "
        f"{a['repeats']} runs per path (alternated)"
    )
    print(f"  {'':<12} {'samples':>8} {'p50':>9} {'p90':>9} {'p99':>9} {'min':>9} {'max':>9}")
    for via, s in r["latency"].items():
        print(
            f"  {via:<12} {s['samples']:>8} {s['p50_ms']:>7.2f}ms {s['p90_ms']:>7.2f}ms "
            f"{s['p99_ms']:>7.2f}ms {s['min_ms']:>7.2f}ms {s['max_ms']:>7.2f}ms"
        )
    t = r["throughput"]
    print(
        f"\n2. one run: {a['bursts']} tool steps x {a['events']} custom events "
        f"({t['none']['producer_s'] * 1000:.0f} ms with no reader, "
        f"{t['none_after']['producer_s'] * 1000:.0f} ms in a second run)"
    )
    print(
        f"  {'readers':<12} {'chunks':>7} {'run took':>9} {'all read':>9} {'chunks/s':>10} "
        f"{'p50':>9} {'p99':>9} {'max':>9} {'CPU s':>6} {'client':>6}"
    )
    for via in [v for v in ("inproc", "sse") if v in t]:
        s = t[via]
        client = s.get("client_process_cpu_s")
        print(
            f"  {s['readers']:>3} {via:<8} {s['chunks_per_reader']:>7} "
            f"{s['producer_s'] * 1000:>7.0f}ms {s['all_delivered_s'] * 1000:>7.0f}ms "
            f"{s['chunks_per_s']:>10.0f} {s['latency_p50_ms']:>7.1f}ms "
            f"{s['latency_p99_ms']:>7.1f}ms {s['latency_max_ms']:>7.1f}ms "
            f"{s['process_cpu_s']:>6.1f} {'' if client is None else f'{client:.1f}':>6}"
        )
    print(
        "  chunks = per reader (custom events, tool_start/tool_end, lifecycle); chunks/s = "
        "all readers' chunks / (go -> last reader done); latency from the writing "
        "transaction's now() to the reader; CPU s = this process (both threads) during "
        "the run, client = the SSE clients' process"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, kind = server_url(args.database_url)
    with fresh_database(server) as database_url:
        llm = BenchLLM()
        agents = [
            Agent(TALKER, system_prompt="You talk."),
            Agent(BURSTER, system_prompt="You emit.", tools=[burst], max_steps=10_000),
        ]
        helix = HelixDBOS(
            agents,
            database_url=database_url,
            llm=llm,
            executor_id=f"bench-{uuid.uuid4().hex[:8]}",
            application_version="helix-bench",
        )
        helix.launch()  # on this loop
        sse: SSEServer | None = None
        sse_error = ""
        bench: Bench | None = None
        try:
            if not args.no_sse:
                try:
                    sse = SSEServer(helix)
                    await sse.start()
                except Exception as exc:  # the server is optional: measure in-process only
                    sse_error = f"{type(exc).__name__}: {exc}"
                    sse = None
            else:
                sse_error = "--no-sse"
            bench = Bench(helix, llm, sse)
            bench.client_processes = args.client_processes
            figures = await measure(bench, args)
        finally:
            if bench is not None:
                await bench.close()
            if sse is not None:
                await sse.stop()
            helix.shutdown()
    result = {
        "database": kind,
        "code": str(Path(helix_dbos.__file__).parent),
        "cores": os.cpu_count(),
        "sse": sse is not None,
        "sse_error": sse_error,
        "args": {
            k: getattr(args, k) for k in ("pieces", "gap", "repeats", "readers", "bursts", "events")
        },
        **figures,
    }
    print_report(kind, server, result)
    print("\n" + json.dumps(rounded(result)))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pieces", type=int, default=20, help="text pieces per latency run")
    parser.add_argument("--gap", type=float, default=0.06, help="seconds between pieces (0.06)")
    parser.add_argument("--repeats", type=int, default=5, help="latency runs per path (5)")
    parser.add_argument("--readers", type=int, default=100, help="concurrent readers (100)")
    parser.add_argument("--bursts", type=int, default=10, help="tool steps in the burst run (10)")
    parser.add_argument("--events", type=int, default=100, help="custom events per step (100)")
    parser.add_argument(
        "--pyinstrument", metavar="PREFIX", help="profile the throughput runs into PREFIX-*.txt"
    )
    parser.add_argument(
        "--client-processes", type=int, default=4, help="processes the SSE readers use (4)"
    )
    parser.add_argument("--no-sse", action="store_true", help="skip the HTTP SSE server")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    args = parser.parse_args(argv)
    if args.pieces < 1 or args.repeats < 1 or args.readers < 1 or args.bursts < 1:
        parser.error("--pieces, --repeats, --readers and --bursts must be >= 1")
    if args.gap <= 0.05:
        print("note: pieces closer than 50 ms are coalesced into fewer chunks", file=sys.stderr)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
