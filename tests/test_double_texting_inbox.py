"""The approvals inbox shows the messages queued on a waiting run's session (issue 31),
in headless Chromium (Playwright, system Chromium), as the inbox tests run it."""

from __future__ import annotations

from helpers import calls, wait_until_waiting
from live_server import serve

from helix_dbos import tool
from helix_dbos.server import create_app


async def test_a_waiting_runs_card_lists_the_messages_queued_on_its_session(
    browser_page, helix, make_agent, mock_llm
):
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/q"})),
        {"type": "text", "content": "Deleted."},
        {"type": "text", "content": "Noted: first."},
        {"type": "text", "content": "Noted: second."},
        agent=agent.name,
    )
    first = await helix.execute(agent, "delete /tmp/q")
    sid = first.session_id
    await wait_until_waiting(helix, sid)
    before = await helix.execute(
        agent, "queued before", session_id=sid, multitask_strategy="enqueue"
    )

    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        card = page.locator(f'[data-run-id="{first.run_id}"]')
        queued = card.locator(".queued")
        await expect(queued).to_contain_text("Queued (1 message)")
        await expect(queued).to_contain_text("queued before")
        # One sent while the page is open shows up by itself (its message_queued chunk).
        after = await helix.execute(
            agent, "queued after", session_id=sid, multitask_strategy="enqueue"
        )
        await expect(queued).to_contain_text("Queued (2 messages)", timeout=15_000)
        await expect(queued.locator("li").nth(1)).to_contain_text("#2 enqueue")
        await card.locator('[data-action="approve"]').click()
        await expect(card.locator(".run-status")).to_have_text("completed", timeout=20_000)
    assert errors == [], errors
    assert (await before.result()).output == "Noted: first."
    assert (await after.result()).output == "Noted: second."
