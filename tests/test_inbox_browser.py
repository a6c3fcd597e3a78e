"""The approvals inbox end to end in headless Chromium (Playwright, system Chromium; the
`browser_page` fixture is in conftest.py)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

from helpers import calls, wait_until_waiting
from live_server import serve

from helix_dbos import GuardrailResult, UsageLimits, sub_agent_tool, tool
from helix_dbos.server import bearer_token, create_app
from helix_dbos.store.database import libpq_url


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


async def test_inbox_polish_sign_in_filters_controls_and_answers_that_survive_a_reload(
    browser_page, helix, make_agent, mock_llm, tmp_path
):
    """Checked with screenshots too (tmp_path/inbox-*.png): sign-in form, loading state,
    filters, interrupt/abort buttons, the answered list read back from SQL after a reload."""
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    await page.set_viewport_size({"width": 1200, "height": 900})

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    agents = [make_agent(tools=[delete_file]) for _ in range(3)]
    for n, agent in enumerate(agents):
        mock_llm.add_responses(
            calls((f"p{n}", "delete_file", {"path": f"/tmp/polish-{n}"})),
            {"type": "text", "content": "Deleted it."},
            agent=agent.name,
        )
    handles = [await helix.execute(a, f"delete /tmp/polish-{n}") for n, a in enumerate(agents)]
    for handle in handles:
        await wait_until_waiting(helix, handle.session_id)
    first, second, third = handles

    with serve(create_app(helix, authenticate=bearer_token("s3cret"))) as url:
        signed_out = await page.goto(f"{url}/inbox")
        assert signed_out is not None and signed_out.status == 401
        await expect(page.locator("#sign-in")).to_be_visible()
        assert "Not authenticated" not in await page.content()
        await page.screenshot(path=tmp_path / "inbox-1-sign-in.png")

        # The first /runs answer is held back: the page says it is loading, not "nothing".
        release = asyncio.Event()

        async def slow_runs(route):
            await release.wait()
            await route.continue_()

        await page.route("**/runs?status=waiting", slow_runs)
        await page.fill("#token", "s3cret")
        await page.fill("#name", "Ada")
        await page.click("#sign-in button")
        await expect(page.locator("#loading")).to_be_visible()
        await expect(page.locator("#waiting-empty")).to_be_hidden()
        release.set()
        await expect(page.locator("#loading")).to_be_hidden()
        await page.unroute("**/runs?status=waiting")
        for handle in handles:
            await expect(page.locator(f'#waiting [data-run-id="{handle.run_id}"]')).to_be_visible()
        icon = await page.get_attribute('link[rel="icon"]', "href")
        assert icon is not None and icon.startswith("data:image/svg+xml")

        # Labels never run into their values (the role column of the conversation).
        card = page.locator(f'[data-run-id="{first.run_id}"]')
        await expect(card.locator(".transcript li")).to_have_count(2)
        await card.locator("summary").click()  # the conversation is folded at first
        apart = await card.evaluate(
            """card => [...card.querySelectorAll('.transcript li')].every(li => {
                const role = li.querySelector('.role').getBoundingClientRect();
                const range = document.createRange(); range.selectNodeContents(li.lastChild);
                return role.right <= range.getBoundingClientRect().left + 0.5; })"""
        )
        assert apart
        await expect(card.locator(".summary-count")).to_have_text("Conversation (2 messages)")
        await expect(card.locator(".preview")).to_have_text("delete /tmp/polish-0")
        await page.screenshot(path=tmp_path / "inbox-2-waiting.png", full_page=True)

        # Filter by agent, then search by session.
        await page.select_option("#agent-filter", agents[1].name)
        await expect(page.locator(f'[data-run-id="{second.run_id}"]')).to_be_visible()
        await expect(page.locator(f'[data-run-id="{first.run_id}"]')).to_be_hidden()
        await page.select_option("#agent-filter", "")
        await page.fill("#session-search", third.session_id[-10:])
        await expect(page.locator(f'[data-run-id="{third.run_id}"]')).to_be_visible()
        await expect(page.locator(f'[data-run-id="{second.run_id}"]')).to_be_hidden()
        await page.fill("#session-search", "")

        # Approve one, interrupt one, abort one, from the page.
        await card.locator('[data-action="approve"]').click()
        await expect(card.locator(".run-status").first).to_have_text("completed", timeout=20_000)
        await expect(card.locator(".run-controls")).to_have_count(0)
        await expect(card.locator(".since").first).to_contain_text("finished")
        await expect(card.locator(".answered-note")).to_have_text("Answered.")
        await expect(card.locator(".summary-count")).to_have_text("Conversation (4 messages)")
        for handle, action, status in (
            (second, "interrupt", "interrupted"),
            (third, "abort", "aborted"),
        ):
            other = page.locator(f'[data-run-id="{handle.run_id}"]')
            await other.locator(f'.run-controls [data-action="{action}"]').click()
            await expect(other.locator(".run-status").first).to_have_text(status, timeout=20_000)
            assert (await handle.result()).status == status
        assert (await first.result()).status == "completed"
        answered = page.locator('#answered li[data-tool-call-id="p0"]')
        await expect(answered).to_contain_text("approved")
        await expect(answered).to_contain_text("by Ada")
        await page.screenshot(path=tmp_path / "inbox-3-answered.png", full_page=True)

        # A reload keeps what was answered (read from SQL), with who and when.
        await page.reload()
        await expect(page.locator("#loading")).to_be_hidden()
        answered = page.locator(f'#answered li[data-session-id="{first.session_id}"]')
        await expect(answered).to_contain_text("delete_file")
        await expect(answered).to_contain_text("approved")
        await expect(answered).to_contain_text("by Ada")
        await expect(answered.locator(".run-status")).to_have_text("completed")
        stopped = page.locator(f'#answered li[data-session-id="{second.session_id}"]')
        await expect(stopped.locator(".verdict")).to_have_text("interrupted")
        await expect(page.locator(f'#waiting [data-run-id="{first.run_id}"]')).to_have_count(0)
        await page.screenshot(path=tmp_path / "inbox-4-reloaded.png", full_page=True)

    assert errors == [], errors


SECONDS = re.compile(r"\d:\d\d:\d\d")  # 10:42:07: a time with seconds
RAW_SEND = (
    "import sys; from dbos import DBOSClient\n"
    "c = DBOSClient(system_database_url=sys.argv[1])\n"
    "c.send(sys.argv[2], {'tool_call_id': sys.argv[3], 'approved': True}, 'helix.approval')\n"
    "c.destroy()\n"
)


async def test_four_waiting_cards_fit_a_laptop_screen_and_a_finished_one_leaves(
    browser_page, helix, make_agent, mock_llm, database_url, tmp_path
):
    """Issue 29.9, checked with a screenshot too (tmp_path/inbox-laptop.png): at 1280x900
    four waiting cards show at once (conversation folded, ids shortened), times carry no
    seconds, a run answered elsewhere leaves "Waiting for a human" without a reload and is
    listed "by DBOS.send", and a tool's name keeps its case in the conversation."""
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    await page.set_viewport_size({"width": 1280, "height": 900})

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    agents = [make_agent(tools=[delete_file]) for _ in range(5)]
    for n, agent in enumerate(agents):
        mock_llm.add_responses(
            calls((f"f{n}", "delete_file", {"path": f"/srv/reports/2026/q{n}-summary.csv"})),
            {"type": "text", "content": "Deleted it."},
            agent=agent.name,
        )
    handles = [
        await helix.execute(a, f"please delete the report /srv/reports/2026/q{n}-summary.csv")
        for n, a in enumerate(agents)
    ]
    for handle in handles:
        await wait_until_waiting(helix, handle.session_id)
    first = handles[0]

    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        for handle in handles:
            card = page.locator(f'#waiting [data-run-id="{handle.run_id}"]')
            await expect(card.locator("summary")).to_contain_text("2 messages")
        await page.screenshot(path=tmp_path / "inbox-laptop.png")
        # Only this test's cards: the newest runs, listed first (the session's database
        # may hold other tests' waiting runs, listed below them).
        boxes = await page.evaluate(
            "ids => ids.map(id => { const r = document.querySelector("
            '`#waiting [data-run-id="${id}"]`).getBoundingClientRect(); '
            "return [r.top, r.bottom]; })",
            [h.run_id for h in handles],
        )
        shown = [
            (top, bottom)
            for top, bottom in boxes
            if min(bottom, 900) - max(top, 0) >= 0.75 * (bottom - top)
        ]
        assert len(shown) >= 4, boxes

        # Ids are short on screen, whole in the title (and one click copies them).
        card = page.locator(f'#waiting [data-run-id="{first.run_id}"]')
        session = card.locator(f'.ids code[title^="{first.session_id}"]')
        await expect(session).to_have_count(1)
        assert len(await session.inner_text()) < len(first.session_id)
        since = await card.locator(".since").first.inner_text()
        assert re.search(r"\d:\d\d", since) and not SECONDS.search(since), since

        waiting = int(await page.locator("#waiting-count").inner_text())
        # Answered from another process with a raw DBOSClient.send: the card leaves the
        # waiting list by itself, and "Recently answered" says who.
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", RAW_SEND, libpq_url(database_url), first.workflow_id, "f0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert (await first.result()).status == "completed"
        done = page.locator(f'[data-run-id="{first.run_id}"]')
        await expect(done.locator(".run-status")).to_have_text("completed", timeout=20_000)
        await expect(page.locator(f'#waiting [data-run-id="{first.run_id}"]')).to_have_count(0)
        await expect(page.locator("#waiting-count")).to_have_text(str(waiting - 1))
        heading = await done.evaluate(
            """card => [...document.querySelectorAll('h2')]
                .filter(h => !h.hidden && h.getBoundingClientRect().bottom <= card.getBoundingClientRect().top)
                .map(h => h.textContent).pop()"""
        )
        assert heading is not None and "Waiting for a human" not in heading, heading
        answered = page.locator('#answered li[data-tool-call-id="f0"]')
        await expect(answered).to_contain_text("approved", timeout=20_000)
        await expect(answered.locator(".who")).to_contain_text("by DBOS.send")
        assert not SECONDS.search(await answered.inner_text())

        # The conversation unfolds on a click; the tool's name keeps its case.
        await done.locator("summary").click()
        role = done.locator('.transcript li[data-role="tool"] .role')
        await expect(role).to_have_count(1)
        assert await role.inner_text() == "tool delete_file"
        for node in await page.locator(".since, .last-event, .who").all_inner_texts():
            assert not SECONDS.search(node), node
        await page.screenshot(path=tmp_path / "inbox-laptop-finished.png", full_page=True)
        for handle in handles[1:]:
            await helix.abort(handle.session_id)  # while served: their streams end with them

    assert errors == [], errors


async def test_a_sub_agents_card_names_its_root_and_depth_with_ids_one_click_away(
    browser_page, helix, make_agent, mock_llm, tmp_path
):
    """The compact card keeps a sub-agent's root and depth; a click shows an id whole
    (tmp_path/inbox-sub-agent.png)."""
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    await page.set_viewport_size({"width": 1280, "height": 900})

    @tool(require_approval=True)
    def publish(post: str) -> str:
        """Publish a post."""
        return f"published {post}"

    child = make_agent(tools=[publish])
    parent = make_agent(tools=[sub_agent_tool(child, name="writer")])
    mock_llm.add_response(calls(("w", "subagent__writer", {"message": "post"})), agent=parent.name)
    mock_llm.add_response(calls(("p1", "publish", {"post": "hi"})), agent=child.name)
    handle = await helix.execute(parent, "write a post")
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        card = page.locator(
            f'#waiting .card[data-root-session-id="{handle.session_id}"]'
            f':not([data-session-id="{handle.session_id}"])'
        )
        await expect(card).to_be_visible(timeout=20_000)
        await expect(card.locator(".depth")).to_have_text("1")
        root = card.locator("code.root")
        await expect(root).to_have_attribute("title", f"{handle.session_id} (click to copy)")
        await root.click()
        await expect(root).to_have_text(handle.session_id)
        await card.screenshot(path=tmp_path / "inbox-sub-agent.png")
        await root.click()
        assert len(await root.inner_text()) < len(handle.session_id)
        await card.screenshot(path=tmp_path / "inbox-sub-agent-short.png")
        await helix.abort(handle.session_id)  # while served: the streams end with it
    assert (await handle.result()).status == "aborted"
    assert errors == [], errors


async def test_a_card_a_control_ended_shows_its_stop_reason_and_error(
    browser_page, helix, make_agent, mock_llm
):
    """Issue 50: a run a usage limit or a guardrail ends after its approval resolves as
    `failed (usage_limit)` / `failed (guardrail)`, with the error that names it."""
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page

    @tool(require_approval=True)
    def deploy(env: str) -> str:
        """Deploy."""
        return f"deployed {env}"

    def no_shouting(output: object) -> GuardrailResult:
        return GuardrailResult(tripwire=str(output).isupper(), reason="shouting")

    limited = make_agent(tools=[deploy], usage_limits=UsageLimits(requests=1))
    guarded = make_agent(tools=[deploy], output_guardrails=[no_shouting])
    mock_llm.add_responses(
        calls(("l1", "deploy", {"env": "prod"})),
        {"type": "text", "content": "never asked"},
        agent=limited.name,
    )
    mock_llm.add_responses(
        calls(("g1", "deploy", {"env": "dev"})),
        {"type": "text", "content": "DEPLOYED"},
        agent=guarded.name,
    )
    ended = [
        (await helix.execute(limited, "deploy prod"), "l1", "usage_limit",
         "Usage limit exceeded: requests limit 1, used 1"),
        (await helix.execute(guarded, "deploy dev"), "g1", "guardrail",
         "Guardrail 'no_shouting' (output) tripped: shouting"),
    ]  # fmt: skip
    for handle, *_ in ended:
        await wait_until_waiting(helix, handle.session_id)

    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        for handle, call_id, stop_reason, error in ended:
            card = page.locator(f'[data-run-id="{handle.run_id}"]')
            await card.locator(f'[data-tool-call-id="{call_id}"] [data-action="approve"]').click()
            status = card.locator(".run-status")
            await expect(status).to_have_text(f"failed ({stop_reason})", timeout=20_000)
            await expect(card.locator(".outcome")).to_have_text(error)
            result = await handle.result()
            assert (result.stop_reason, result.error) == (stop_reason, error)

    assert errors == [], errors


def test_the_sign_in_cookie_holds_any_token_url_encoded():
    """The sign-in form stores encodeURIComponent(token): tokens with / + = still work."""
    from starlette.requests import Request  # noqa: PLC0415 - only this test needs it

    check = bearer_token("a/b+c=")

    def request(cookie: str) -> Request:
        return Request(
            {"type": "http", "headers": [(b"cookie", cookie.encode())], "query_string": b""}
        )

    assert check(request("helix_token=a%2Fb%2Bc%3D")) is True
    assert check(request("helix_token=a%2Fb%2Bc")) is False
