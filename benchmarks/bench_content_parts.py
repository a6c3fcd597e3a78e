"""What a run that carries a PDF writes (issue 49, docs/content-parts.md).

One agent, one fresh database, one run of N steps (N-1 tool calls, then the answer) whose
input holds a PDF of `--size` bytes; the model (MockLLM) checks at every step that it got
the PDF's bytes back. Then plain SQL: the rows and bytes of `helix.blobs`, the size of
the input message's `parts` reference, and the bytes of DBOS's step outputs and workflow
inputs for the run. Were the bytes inline, every checkpoint of the transcript would carry
them; here they are written once.

usage: .venv/bin/python benchmarks/bench_content_parts.py [--steps N] [--size BYTES]
       [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from typing import Any

import psycopg
from bench_agent_loop import fresh_database, server_url
from bench_common import rounded

from helix_dbos import Agent, BinaryContent, HelixDBOS, MockLLM, tool
from helix_dbos.store.database import libpq_url


@tool
def note(i: int) -> str:
    """One step of the run."""
    return f"noted {i}"


def responder(steps: int, pdf: bytes) -> Any:
    def respond(request: Any) -> dict[str, Any]:
        user = next(m for m in request.messages if m.role == "user")
        assert user.attachments[0].data == pdf, "the model did not get the PDF's bytes"
        done = sum(1 for m in request.messages if m.role == "assistant")
        if done < steps - 1:
            call = {"id": f"n{done}", "name": "note", "arguments": {"i": done}}
            return {"type": "tool_calls", "tool_calls": [call]}
        return {"type": "text", "content": "read"}

    return respond


def figures(database_url: str, run_id: str, session_id: str) -> dict[str, Any]:
    workflow = f"helix-{run_id}"
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        blobs, blob_bytes = conn.execute(
            "SELECT count(*), COALESCE(sum(octet_length(data)), 0) FROM helix.blobs"
        ).fetchone() or (0, 0)
        parts_bytes, messages = conn.execute(
            "SELECT COALESCE(sum(octet_length(parts::text)), 0), count(*) FROM helix.messages "
            "WHERE session_id = %s",
            (session_id,),
        ).fetchone() or (0, 0)
        steps, outputs, largest = conn.execute(
            "SELECT count(*), COALESCE(sum(octet_length(output)), 0), "
            "COALESCE(max(octet_length(output)), 0) FROM dbos.operation_outputs "
            "WHERE workflow_uuid = %s",
            (workflow,),
        ).fetchone() or (0, 0, 0)
    return {
        "blob_rows": blobs,
        "blob_bytes": blob_bytes,
        "messages": messages,
        "parts_reference_bytes": parts_bytes,
        "dbos_steps": steps,
        "dbos_step_output_bytes": outputs,
        "largest_step_output_bytes": largest,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, kind = server_url(args.database_url)
    pdf = b"%PDF-1.7\n" + os.urandom(args.size - 9)
    agent = Agent("bench_parts", tools=[note], max_steps=args.steps + 5)
    with fresh_database(server) as database_url:
        helix = HelixDBOS(
            [agent],
            database_url=database_url,
            llm=MockLLM(responder(args.steps, pdf)),
            executor_id=f"bench-{uuid.uuid4().hex[:8]}",
            application_version="helix-bench",
        )
        helix.launch()
        try:
            started = time.perf_counter()
            part = BinaryContent(data=pdf, media_type="application/pdf", identifier="bench.pdf")
            handle = await helix.execute(agent, ["Read this.", part])
            result = await handle.result()
            seconds = time.perf_counter() - started
            assert result.status == "completed", result.error
            report = {
                "database": kind,
                "steps": args.steps,
                "pdf_bytes": args.size,
                "run_seconds": seconds,
                **figures(database_url, result.run_id, result.session_id),
            }
        finally:
            helix.shutdown()
    report["bytes_written_per_pdf_byte"] = (
        report["blob_bytes"] + report["dbos_step_output_bytes"] + report["parts_reference_bytes"]
    ) / args.size
    print(json.dumps(rounded(report), indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="model calls in the run (20)")
    parser.add_argument("--size", type=int, default=1024 * 1024, help="PDF bytes (1 MiB)")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
