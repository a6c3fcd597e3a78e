"""Issue 35 (and 29.6) in headless Chromium: what a human approves is what they see, the
token never reaches a script or an address, the inbox cannot be framed, and the API
docs render without internet."""

from __future__ import annotations

import pytest
from helpers import calls, wait_until_waiting
from live_server import serve

from helix_dbos import tool
from helix_dbos.server import bearer_token, create_app

SPOOF = "/home/alice/invoice\u202efdp.exe"


async def test_bidi_and_invisible_characters_show_as_highlighted_escapes(
    browser_page, helix, make_agent, mock_llm, tmp_path
):
    """Checked with a screenshot too (tmp_path/inbox-bidi.png)."""
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        calls(("z1", "delete_file", {"path": SPOOF, "note": "zero\u200bwidth\u2066x"})),
        {"type": "text", "content": "Done."},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "tidy up")
    await wait_until_waiting(helix, handle.session_id)
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        call = page.locator(f'[data-run-id="{handle.run_id}"] [data-tool-call-id="z1"]')
        await expect(call).to_be_visible()
        shown = await call.locator(".input").inner_text()
        assert "\u202e" not in shown and "\u200b" not in shown and "\u2066" not in shown
        assert "invoice\\u202Efdp.exe" in shown
        marks = call.locator(".input mark.invisible")
        await expect(marks).to_have_count(3)
        assert sorted(await marks.all_inner_texts()) == ["\\u200B", "\\u202E", "\\u2066"]
        await expect(call.locator(".invisible-warning")).to_be_visible()
        await call.screenshot(path=tmp_path / "inbox-bidi.png")
        # The transcript shows the call's arguments the same way.
        await page.locator(f'[data-run-id="{handle.run_id}"] summary').click()  # folded
        transcript = page.locator(f'[data-run-id="{handle.run_id}"] .transcript')
        await expect(transcript.locator("mark.invisible")).to_have_count(3)
        assert "\\u202E" in await transcript.locator("mark.invisible").all_inner_texts()
        await helix.abort(handle.session_id)  # while served: its stream ends with it
    assert errors == [], errors


async def test_sign_in_keeps_the_token_from_scripts_addresses_and_frames(
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

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        calls(("t1", "delete_file", {"path": "/tmp/token-test"})),
        {"type": "text", "content": "Deleted."},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "rm /tmp/token-test")
    await wait_until_waiting(helix, handle.session_id)
    sent = []
    page.on("request", lambda request: sent.append(request))
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security" in m.text else 0)

    with serve(create_app(helix, authenticate=bearer_token("s3cret-tok"))) as url:
        await page.goto(f"{url}/inbox")
        await page.fill("#token", "s3cret-tok")
        await page.fill("#name", "Ada")
        await page.click("#sign-in button")
        card = page.locator(f'[data-run-id="{handle.run_id}"]')
        await expect(card).to_be_visible()
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
        [cookie] = await page.context.cookies()
        assert cookie["name"] == "helix_token" and cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict" and cookie["expires"] > 0
        await card.locator('[data-action="approve"]').click()
        await expect(card.locator(".run-status")).to_have_text("completed", timeout=20_000)
        await expect(card.locator(".last-event")).to_contain_text("run_completed")  # over SSE
        requests = [(r.url, await r.all_headers()) for r in sent]
        sse = [u for u, _ in requests if "/sse?" in u]
        assert sse, "the inbox follows the run over /sse, with the cookie"
        assert not [u for u, _ in requests if "token" in u], requests
        assert not [u for u, h in requests if "authorization" in h]
        assert not [u for u, h in requests if "referer" in h]  # Referrer-Policy: no-referrer

        # A token in the address goes into the cookie and out of the address bar.
        await page.context.clear_cookies()
        await page.goto(f"{url}/inbox?token=s3cret-tok")
        assert page.url == f"{url}/inbox"
        answered = page.locator(f'#answered li[data-session-id="{handle.session_id}"]')
        await expect(answered).to_contain_text("by Ada")  # the API calls carry the cookie
        assert await page.evaluate("document.cookie") == ""

        assert violations == [], violations  # the inbox needs nothing its CSP forbids

        # Another page (no CSP of its own) cannot frame the signed-in inbox.
        await page.goto("about:blank")
        await page.set_content(f'<iframe id="f" src="{url}/inbox"></iframe>')
        [child] = [f for f in page.frames if f is not page.main_frame]
        assert child.url.startswith("chrome-error:"), child.url  # frame-ancestors 'none'
        await expect(page.frame_locator("#f").locator("header h1")).to_have_count(0)
    assert ran == ["/tmp/token-test"]
    assert errors == [], errors


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
async def test_api_docs_render_offline(browser_page, helix, path):
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    elsewhere: list[str] = []

    with serve(create_app(helix, authenticate=bearer_token("s3cret"))) as url:

        async def local_only(route):
            if route.request.url.startswith(url):
                await route.continue_()
            else:  # no internet: a CDN would fail here
                elsewhere.append(route.request.url)
                await route.abort()

        await page.route("**/*", local_only)
        await page.goto(f"{url}{path}")
        if path == "/docs":
            await expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
            await expect(page.locator(".swagger-ui")).to_contain_text("/submit-tool-result")
        else:
            await expect(page.locator(".api-content")).to_contain_text("submit-tool-result")
    assert elsewhere == [], elsewhere
    assert errors == [], errors
