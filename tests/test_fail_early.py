"""Configuration mistakes are named at launch() and execute(), not in a failed run."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import forkserver
import pytest
from helpers import sql

from helix_dbos import LLMConfig, LLMConfigurationError, MockLLM
from helix_dbos.orchestration.types import TextStepResult

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def sessions_of(database_url: str, agent_name: str) -> int:
    return sql(
        database_url, "SELECT count(*) FROM helix.sessions WHERE agent_name = %s", agent_name
    )[0][0]


async def test_execute_names_the_missing_key_and_stores_nothing(
    helix, make_agent, database_url, no_keys, monkeypatch
):
    claude = make_agent(llm=LLMConfig(model="anthropic:claude-sonnet-4-6"))
    with pytest.raises(LLMConfigurationError, match="ANTHROPIC_API_KEY is not set"):
        await helix.execute(claude, "hello")
    gpt = make_agent(llm=LLMConfig(model="openai:gpt-4o"))
    with pytest.raises(LLMConfigurationError, match="OPENAI_API_KEY is not set"):
        await helix.execute(gpt, "hello")
    assert sessions_of(database_url, claude.name) == 0 and sessions_of(database_url, gpt.name) == 0

    # An OpenAI-compatible server needs no key; a key set after launch is seen at execute().
    local = make_agent(llm=LLMConfig(model="openai:llama3", base_url="http://127.0.0.1:9/v1"))
    assert helix.runtime.configuration_problem(local) is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert helix.runtime.configuration_problem(claude) is None


async def test_an_unknown_provider_prefix_lists_the_valid_ones(helix, make_agent, database_url):
    typo = make_agent(llm=LLMConfig(model="antropic:claude-sonnet-4-6"))
    with pytest.raises(LLMConfigurationError) as raised:
        await helix.execute(typo, "hello")
    message = str(raised.value)
    assert f"Agent '{typo.name}'" in message and "'antropic:claude-sonnet-4-6'" in message
    assert "anthropic, openai" in message
    assert sessions_of(database_url, typo.name) == 0


def test_launch_reports_every_agent_it_cannot_run(database_url, no_keys):
    script = textwrap.dedent(
        """
        from helix_dbos import Agent, HelixDBOS, LLMConfig, LLMConfigurationError
        helix = HelixDBOS(
            [
                Agent("claude", llm=LLMConfig(model="anthropic:claude-sonnet-4-6")),
                Agent("scripted"),
            ],
            application_version="fail-early-test",
        )
        try:
            helix.launch()
        except LLMConfigurationError as exc:
            print(exc)
            raise SystemExit(3)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    env["HELIX_DATABASE_URL"] = database_url
    done = forkserver.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "Agent 'claude' (model 'anthropic:claude-sonnet-4-6'): ANTHROPIC_API_KEY" in done.stdout
    assert "Agent 'scripted' uses model 'mock': pass HelixDBOS(llm=MockLLM(...))" in done.stdout
    assert sql(
        database_url,
        "SELECT count(*) FROM helix.workers WHERE application_version = %s",
        "fail-early-test",
    ) == [(0,)], "nothing was started: no lease taken"


def test_mock_llm_takes_a_plain_list_or_refuses_at_construction():
    mock = MockLLM([{"type": "text", "content": "first"}, TextStepResult(content="second")])
    assert [r.content for r in mock._queue] == ["first", "second"]
    with pytest.raises(TypeError, match="a function of the request or a list of responses"):
        MockLLM("hello")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MockLLM([{"type": "nonsense"}])
