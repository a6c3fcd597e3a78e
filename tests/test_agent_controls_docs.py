"""docs/agent-controls.md as pasted: its usage-limit examples run and print what the
page says."""

from __future__ import annotations

from tests.docs_text import PAGES, code_blocks, run_pasted

PAGE = PAGES["docs/agent-controls.md"]


def test_the_usage_limits_example_runs_as_pasted(database_url, tmp_path):
    snippet = code_blocks(PAGE, "python")[0]
    done = run_pasted(snippet, database_url, tmp_path, name="agent_controls.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "failed usage_limit",
        "Usage limit exceeded: total_tokens limit 1000, used 1230",
        "raised: UsageLimitExceeded",
        "model calls: 3",
    ]
    for line in printed:
        assert f"`{line}`" in PAGE


def test_the_ancestor_limits_example_runs_as_pasted(database_url, tmp_path):
    snippet = code_blocks(PAGE, "python")[1]
    done = run_pasted(snippet, database_url, tmp_path, name="ancestor_limits.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "failed usage_limit",
        "Usage limit exceeded: requests limit 4, used 4",
        "researcher usage_limit 3",
        "Usage limit exceeded: requests limit 4, used 4 (the limit of ancestor run "
        "<lead's run>, agent 'lead')",
    ]
    for line in printed:
        assert f"`{line}`" in PAGE


def test_the_guardrails_example_runs_as_pasted(database_url, tmp_path):
    snippet = code_blocks(PAGE, "python")[2]
    done = run_pasted(snippet, database_url, tmp_path, name="guardrails.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "failed guardrail 0",
        "Guardrail 'no_passwords' (input) tripped: asks for a password",
        "failed guardrail",
        "raised: Guardrail 'no_shouting' (output) tripped: shouting",
        '[guardrail tripped] {"guardrail":"no_shouting","kind":"output","reason":"shouting"}',
    ]
    for line in printed:
        assert f"`{line}`" in PAGE


def test_the_tool_guardrail_example_defines_a_guarded_tool():
    snippet = code_blocks(PAGE, "python")[3]
    names: dict = {}
    exec("from helix_dbos import GuardrailResult, tool\n" + snippet, names)
    assert [g.__name__ for g in names["pay"].guardrails] == ["small_amounts"]
    tripped = names["small_amounts"]({"amount": 500})
    assert tripped.tripwire and tripped.reason == "amount 500 over 100"


def test_the_parallel_guardrail_example_runs_as_pasted(database_url, tmp_path):
    snippet = code_blocks(PAGE, "python")[4]
    done = run_pasted(snippet, database_url, tmp_path, name="parallel_guardrail.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "refund ran",
        "completed Refunded.",
        "failed guardrail 3",
        "Guardrail 'on_topic' (input) tripped: off topic",
    ]
    for line in printed:
        assert f"`{line}`" in PAGE
