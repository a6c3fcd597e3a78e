"""The approvals inbox end to end in headless Chromium (Playwright, system Chromium)."""

from __future__ import annotations

import asyncio
import os

import pytest
from live_server import serve

from helix_dbos import tool
from helix_dbos.server import create_app

CHROMIUM = os.environ.get("HELIX_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def calls(*items: tuple[str, str, dict]) -> dict:
    return {
        "type": "tool_calls",
        "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in items],
    }


async def wait_until_waiting(helix, session_id: str) -> None:
    for _ in range(400):
        run = await helix.get_current_run(session_id)
        if run is not None and run.status == "waiting":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("run never started waiting")


@pytest.fixture
async def browser_page():
    try:
        from playwright.async_api import async_playwright  # noqa: PLC0415 - optional: skip without it
    except ImportError:
        pytest.skip("playwright is not installed: pip install playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"Chromium is not installed at {CHROMIUM}: apt-get install -y chromium")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page, errors
        await browser.close()


async def test_inbox_shows_waiting_calls_and_answers_them(
    browser_page, helix, make_agent, mock_llm
):
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    ran: list[str] = []

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    @tool(execute="client")
    def get_location() -> dict:
        """Where the user is."""

    agent = make_agent(tools=[delete_file, get_location])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/inbox-a"})),
        {"type": "text", "content": "Deleted it for you."},
        agent=agent.name,
    )
    first = await helix.execute(agent, "please delete /tmp/inbox-a")
    await wait_until_waiting(helix, first.session_id)

    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        card = page.locator(f'[data-run-id="{first.run_id}"]')
        await expect(card).to_be_visible()
        await expect(card.locator(".run-status")).to_have_text("waiting")
        call = card.locator('[data-tool-call-id="d1"]')
        await expect(call.locator(".call-title")).to_contain_text("delete_file")
        await expect(call.locator(".input")).to_contain_text('"path": "/tmp/inbox-a"')
        await expect(card.locator(".transcript")).to_contain_text("please delete /tmp/inbox-a")
        assert ran == [], "nothing runs before the click"

        await call.locator('[data-action="approve"]').click()
        await expect(card.locator(".run-status")).to_have_text("completed", timeout=20_000)
        await expect(page.locator(f'#resolved [data-run-id="{first.run_id}"]')).to_be_visible()
        await expect(card.locator(".transcript")).to_contain_text("deleted /tmp/inbox-a")
        await expect(card.locator(".transcript")).to_contain_text("Deleted it for you.")
        await expect(card.locator(".last-event")).to_contain_text("run_completed")  # via SSE
        result = await first.result()
        assert result.status == "completed" and ran == ["/tmp/inbox-a"]

        # A run that starts waiting while the page is open appears by itself; deny it with a reason.
        mock_llm.add_responses(
            calls(("d2", "delete_file", {"path": "/etc/passwd"})),
            {"type": "text", "content": "Understood, keeping it."},
            agent=agent.name,
        )
        second = await helix.execute(agent, "delete /etc/passwd")
        card2 = page.locator(f'[data-run-id="{second.run_id}"]')
        await expect(card2).to_be_visible(timeout=15_000)
        await card2.locator('input[name="reason"]').fill("too risky")
        await card2.locator('[data-action="deny"]').click()
        await expect(card2.locator(".run-status")).to_have_text("completed", timeout=20_000)
        await expect(card2.locator(".transcript")).to_contain_text(
            "was not approved by the user: too risky"
        )
        assert ran == ["/tmp/inbox-a"]

        # A client tool: bad JSON is refused in the page, a JSON result completes the run.
        mock_llm.add_responses(
            calls(("c1", "get_location", {})),
            {"type": "text", "content": "You are in Lisbon."},
            agent=agent.name,
        )
        third = await helix.execute(agent, "where am I?")
        card3 = page.locator(f'[data-run-id="{third.run_id}"]')
        await expect(card3).to_be_visible(timeout=15_000)
        await card3.locator('textarea[name="result"]').fill("{not json")
        await card3.locator('[data-action="submit-result"]').click()
        await expect(card3.locator(".error")).to_contain_text("Not valid JSON")
        await card3.locator('textarea[name="result"]').fill('{"city": "Lisbon"}')
        await card3.locator('[data-action="submit-result"]').click()
        await expect(card3.locator(".run-status")).to_have_text("completed", timeout=20_000)
        await expect(card3.locator(".transcript")).to_contain_text("You are in Lisbon.")
        assert (await third.result()).status == "completed"
        await expect(page.locator(f'#resolved [data-run-id="{third.run_id}"]')).to_be_visible()
        await expect(page.locator(f'#waiting [data-run-id="{third.run_id}"]')).to_have_count(0)

    assert errors == [], errors
