"""The session timeline page (issue 30) in headless Chromium (Playwright, system Chromium):
a session's steps with their messages, state changes and usage, "fork from here", and the
inbox's link to a waiting run's timeline."""

from __future__ import annotations

from helpers import wait_until_waiting
from live_server import serve
from test_time_travel import (
    launch_rocket,
    no_slow_tool_heads,  # noqa: F401 - autouse fixture
    three_step_session,
)

from helix_dbos.server import create_app


async def test_timeline_shows_steps_and_forks_from_a_checkpoint(
    browser_page, helix, make_agent, mock_llm
):
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    agent, result = await three_step_session(helix, make_agent, mock_llm)
    cps = await helix.checkpoints.list(result.session_id)

    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/timeline?session_id={result.session_id}")
        steps = page.locator(".checkpoint.step")
        await expect(steps).to_have_count(4)
        await expect(page.locator("#status")).to_have_text("4 checkpoints, 8 messages")
        await expect(page.locator(".cp-messages li")).to_have_count(8)
        second = page.locator(f'[data-checkpoint-id="{cps[1].checkpoint_id}"]')
        await expect(second.locator(".cp-messages")).to_contain_text("saw sky")
        await expect(second.locator(".usage")).to_have_text(
            "1 llm · 1 tool · "
            + str(
                sum(
                    getattr(cps[1].usage, k) - getattr(cps[0].usage, k)
                    for k in ("input_tokens", "output_tokens")
                )
            )
            + " tokens"
        )
        third = page.locator(f'[data-checkpoint-id="{cps[2].checkpoint_id}"]')
        await expect(third.locator(".state-change")).to_contain_text('"count":5')
        await expect(second.locator(".state-change")).to_have_count(0)

        await second.locator(".fork-here").click()
        link = page.locator("#forked a.fork-link")
        await expect(link).to_be_visible()
        fork_id = await link.text_content()
        assert fork_id and fork_id != result.session_id
        assert (
            await helix.get_messages(fork_id)
            == (await helix.checkpoints.get(result.session_id, cps[1].checkpoint_id)).messages
        )
        await link.click()
        await expect(page.locator(".checkpoint.fork")).to_have_count(1)
        await expect(page.locator(".cp-messages li")).to_have_count(5)
        await expect(page.locator("#origin")).to_contain_text("A fork")

        await page.goto(f"{url}/timeline?session_id=ses_missing")
        await expect(page.locator("#status")).to_contain_text("does not exist")
    assert errors == []


async def test_the_inbox_links_a_waiting_run_to_its_timeline(
    browser_page, helix, make_agent, mock_llm
):
    from playwright.async_api import expect  # noqa: PLC0415

    page, errors = browser_page
    agent = make_agent(tools=[launch_rocket])
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [
            {"id": "r1", "name": "launch_rocket", "arguments": {"target": "venus"}}
        ]},
        {"type": "text", "content": "launched"},
        agent=agent.name,
    )  # fmt: skip
    handle = await helix.execute(agent, "go")
    await wait_until_waiting(helix, handle.session_id)
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        card = page.locator(f'[data-run-id="{handle.run_id}"]')
        await card.locator("a.timeline-link").click()
        head = page.locator(".checkpoint.head")
        await expect(head).to_have_count(1)
        await expect(head.locator(".step")).to_contain_text("head")
        await expect(head.locator(".cp-messages")).to_contain_text("launch_rocket")
        await head.locator(".fork-here").click()
        await page.locator("#forked a.fork-link").click()
        await expect(page.locator(".cp-messages li.is-error")).to_contain_text(
            "Not answered in this branch"
        )
    await helix.approve(handle.session_id, "r1")
    assert (await handle.result()).status == "completed"
    assert errors == []
