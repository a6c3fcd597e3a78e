"""Content parts on the inbox and the timeline page (issue 49), in headless Chromium: a
part shows as a named link that downloads it, never inline, and a name made of HTML stays
text."""

from __future__ import annotations

from helpers import wait_until_waiting
from live_server import serve

from helix_dbos import BinaryContent, tool
from helix_dbos.server import create_app

EVIL = '<img src=x onerror="document.title=1">.pdf'
PDF = BinaryContent(data=b"%PDF-1.4 browser", media_type="application/pdf", identifier=EVIL)


@tool(require_approval=True)
def file_it(folder: str) -> str:
    """File the document (needs approval)."""
    return f"filed in {folder}"


async def test_a_part_is_a_named_download_link_on_the_inbox_and_the_timeline(
    browser_page, helix, make_agent, mock_llm
):
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    agent = make_agent(tools=[file_it])
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "f1", "name": "file_it", "arguments": {"folder": "q3"}}]},
        {"type": "text", "content": "filed"},
        agent=agent.name,
    )  # fmt: skip
    handle = await helix.execute(agent, ["File this report", PDF])
    await wait_until_waiting(helix, handle.session_id)
    route = f"sessions/{handle.session_id}/parts/{PDF.sha256}"
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        card = page.locator(f'[data-run-id="{handle.run_id}"]')
        link = card.locator(".transcript a.part")
        await expect(link).to_have_count(1)
        await expect(link).to_have_text(f"{EVIL} (application/pdf, 16 bytes)")
        assert await link.get_attribute("href") == route
        assert await link.get_attribute("download") == EVIL
        assert await card.locator("img").count() == 0  # the name stayed text
        got = await page.request.get(f"{url}/{route}")
        assert await got.body() == PDF.data
        assert got.headers["content-disposition"].startswith("attachment")
        assert got.headers["x-content-type-options"] == "nosniff"

        await page.goto(f"{url}/timeline?session_id={handle.session_id}")
        timeline_link = page.locator(".cp-messages a.part")
        await expect(timeline_link).to_have_count(1)
        await expect(timeline_link).to_have_text(f"{EVIL} (application/pdf, 16 bytes)")
        assert await timeline_link.get_attribute("href") == route
        assert await page.locator(".cp-messages img").count() == 0
        assert await page.title() != "1"
    await helix.approve(handle.session_id, "f1")
    assert (await handle.result()).status == "completed"
    assert errors == []
