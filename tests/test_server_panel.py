"""The memory panel in a real browser: Playwright driving the system chromium against a real server.

Covers browsing every section, approving, editing (with the diff) and
forgetting a user behind its confirmation, the panel's sign-in and CSRF
protection, and what each kind of key sees (one user's memory never reaches
another user's view, nor the agent-level one). Screenshots land in build/artifacts/panel/ for people to look at.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers_server import AGENT, ALICE_CANARY, BOB_CANARY, Seeded, Server, make_key, running_server, seed
from playwright.sync_api import Browser, Page, expect, sync_playwright

# Assertions wait for their condition; the bound only ends a broken run (forgetting a user
# re-projects and regenerates reports, which can take seconds on a loaded machine).
expect.set_options(timeout=60_000)

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "build" / "artifacts" / "panel"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium, installed with apt when missing (Playwright's own download is not used)."""
    if not CHROMIUM.exists():
        apt = shutil.which("apt-get")
        if apt is None:
            pytest.skip("chromium is not installed and apt-get is unavailable to install it")
        subprocess.run([apt, "update"], check=True, capture_output=True)
        subprocess.run([apt, "install", "-y", "chromium"], check=True, capture_output=True)
    assert CHROMIUM.exists(), "apt-get install chromium did not provide /usr/bin/chromium"
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(chromium), args=ARGS, headless=True)
        yield b
        b.close()


@dataclass
class Panel:
    server: Server
    seeded: Seeded
    operator: str
    agent_key: str
    alice_key: str  # an agent key bound to alice


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Panel]:
    data_dir = tmp_path_factory.mktemp("panel") / "data"
    seeded = seed(data_dir)
    operator = make_key(data_dir, operator=True)
    agent_key = make_key(data_dir, agent=AGENT)
    alice_key = make_key(data_dir, agent=AGENT, user="alice")
    with running_server(data_dir) as server:
        yield Panel(server, seeded, operator, agent_key, alice_key)
        assert "Traceback" not in server.log()


@pytest.fixture
def page(browser: Browser, panel: Panel) -> Iterator[Page]:
    context = browser.new_context(base_url=panel.server.url, viewport={"width": 1280, "height": 900})
    p = context.new_page()
    p.set_default_timeout(60_000)
    yield p
    context.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, key: str) -> None:
    page.goto("/")
    expect(page.locator("h1")).to_have_text("Sign in")  # redirected to the sign-in form
    page.fill("#key", key)
    page.click("button[type=submit]")


def test_sign_in_is_required_and_a_wrong_key_is_refused(page: Page, panel: Panel) -> None:
    response = page.goto("/agents/" + AGENT)
    assert response is not None
    assert "default-src 'none'" in response.headers["content-security-policy"]  # no script may run
    expect(page.locator("h1")).to_have_text("Sign in")
    page.fill("#key", "tmk_wrong")
    page.click("button[type=submit]")
    expect(page.locator(".flash.error")).to_contain_text("unknown or revoked")
    cookies = page.context.cookies()
    assert not cookies


def test_browse_every_section(page: Page, panel: Panel) -> None:
    sign_in(page, panel.operator)
    expect(page.locator("h1")).to_have_text("Agents")
    shot(page, "01-agents")
    page.click(f"text={AGENT}")
    expect(page.locator("h1")).to_have_text(AGENT)
    cookie = next(c for c in page.context.cookies() if c["name"] == "tiermem_panel")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != panel.operator
    # without a chosen user the operator sees agent-level memory only
    expect(page.locator("#viewing")).to_contain_text("agent-level memory only")
    expect(page.locator("#identity")).to_contain_text("support bot of Acme")
    expect(page.locator("#identity")).to_contain_text("help@acme.example")
    expect(page.locator("#queue")).to_contain_text("Escalate outages to the on-call lead")
    expect(page.locator("#queue")).not_to_contain_text("Alice lives in Berlin")
    expect(page.locator("main")).not_to_contain_text(ALICE_CANARY)
    # the selector lists the agent's users; choosing alice shows her memory too
    page.select_option("#view-user", "alice")
    page.click("#viewing button")
    expect(page.locator("#viewing")).to_contain_text("user alice")
    expect(page.locator("#identity")).to_contain_text("support bot of Acme")
    expect(page.locator("#knowledge")).to_contain_text("Alice lives in Paris")
    expect(page.locator("#episodes tbody tr").first).to_contain_text("locker")
    expect(page.locator("#turns")).to_contain_text("level: global")
    expect(page.locator("#turns")).to_contain_text(ALICE_CANARY)
    expect(page.locator("main")).not_to_contain_text(BOB_CANARY)
    expect(page.locator("#used")).to_contain_text("episode: Alice locker")
    expect(page.locator("#queue tbody tr")).to_have_count(4)
    chart = page.locator("#reports img.chart").first
    expect(chart).to_be_visible()
    assert page.evaluate("(img) => img.naturalWidth", chart.element_handle()) > 100  # the PNG really loaded
    shot(page, "02-agent")

    # which memories were used for alice's follow-up turn
    page.locator("#turns tr", has_text="What was my locker code again?").locator("text=memories used").click()
    expect(page.locator("h1")).to_have_text("Turn")
    expect(page.locator("main")).to_contain_text("episode: Alice locker")
    shot(page, "03-turn")

    # provenance: a knowledge item links its source turn
    page.goto(f"/agents/{AGENT}?user=alice#knowledge")
    page.locator("#knowledge tr", has_text="Alice lives in Berlin").locator("a", has_text="turn …").click()
    expect(page.locator("main")).to_contain_text(ALICE_CANARY)


def test_approve_from_the_queue(page: Page, panel: Panel) -> None:
    sign_in(page, panel.operator)
    page.goto(f"/agents/{AGENT}")
    row = page.locator("#queue tbody tr", has_text="Escalate outages to the on-call lead")
    row.locator("button", has_text="Approve").click()
    expect(page.locator(".flash")).to_contain_text("Approved: Escalate outages")
    expect(page.locator("#queue")).not_to_contain_text("Escalate outages to the on-call lead")
    expect(page.locator("#knowledge")).to_contain_text("Escalate outages to the on-call lead")
    shot(page, "04-approved")


def test_edit_with_the_diff(page: Page, panel: Panel) -> None:
    sign_in(page, panel.operator)
    page.goto(f"/agents/{AGENT}?user=alice")
    page.locator("#queue tbody tr", has_text="Alice lives in Berlin").locator(
        "text=edit · diff · sources"
    ).click()
    expect(page.locator("h1")).to_have_text("Proposal")
    diff = page.locator("pre.diff")
    expect(diff).to_contain_text("Alice lives in Paris")
    expect(diff.locator(".add")).to_contain_text("Berlin")
    expect(page.locator("main")).to_contain_text(ALICE_CANARY)  # the source turn, quoted
    shot(page, "05-proposal-diff")
    page.fill("#edit-content", "Alice lives in Berlin (Kreuzberg) since October")
    page.click("text=Save edited version")
    expect(page.locator(".flash")).to_contain_text("Edited and saved as a fact")
    expect(page.locator(".flash")).to_contain_text("+ (Kreuzberg)")
    expect(page.locator("#identity")).to_contain_text("Alice lives in Berlin (Kreuzberg) since October")
    expect(page.locator("#queue")).not_to_contain_text("Alice lives in Berlin")
    shot(page, "06-edited")
    # The edited words stay alice's: the agent-level view (what every user shares) has none of them.
    page.goto(f"/agents/{AGENT}")
    expect(page.locator("main")).not_to_contain_text("Kreuzberg")


def _panel_pages(page: Page, agent_page: str) -> list[str]:
    """The agent page and every panel page it links to (turns, proposals), as text."""
    page.goto(agent_page)
    expect(page.locator("h1")).to_have_text(AGENT)
    links = page.eval_on_selector_all(
        "main a[href^='/agents/']", "els => els.map(e => e.getAttribute('href'))"
    )
    texts = [page.content()]
    for link in sorted({str(x).split("#")[0] for x in links if ".png" not in str(x)}):
        response = page.goto(link)
        assert response is not None and response.status == 200, link
        texts.append(page.content())
    return texts


def test_bobs_canary_never_reaches_alices_key_nor_the_agent_level_view(page: Page, panel: Panel) -> None:
    """Every page reached with alice's key, and every agent-level page, is free of bob's canary."""
    sign_in(page, panel.alice_key)
    expect(page.locator("h1")).to_have_text(AGENT)
    expect(page.locator("#viewing")).to_contain_text("user alice")
    expect(page.locator("#queue button")).to_have_count(0)  # her key reads the queue, does not decide it
    alice_pages = _panel_pages(page, f"/agents/{AGENT}")
    assert len(alice_pages) > 3  # turns and proposals were followed, not just the agent page
    assert any(ALICE_CANARY in text for text in alice_pages)  # her own memory is there
    assert not any(BOB_CANARY in text for text in alice_pages)
    # naming bob in the address does not switch the user of a key bound to alice
    page.goto(f"/agents/{AGENT}?user=bob")
    expect(page.locator(".flash.error")).to_contain_text("reaches only user 'alice'")
    assert BOB_CANARY not in page.content()
    # a turn of bob's, asked for by id, is not there for alice
    page.context.clear_cookies()
    sign_in(page, panel.operator)
    page.goto(f"/agents/{AGENT}?user=bob")
    bob_turn = page.locator("#turns tr", has_text=BOB_CANARY).locator("a", has_text="memories used")
    href = str(bob_turn.first.get_attribute("href")).split("?")[0]
    page.goto(href)  # the operator without a user: agent-level only, so not found
    expect(page.locator(".flash.error")).to_contain_text("visible here")
    page.context.clear_cookies()
    sign_in(page, panel.alice_key)
    response = page.goto(href)
    assert response is not None and response.status == 404
    assert BOB_CANARY not in page.content()

    for key in (panel.operator, panel.agent_key):
        page.context.clear_cookies()
        sign_in(page, key)
        level_pages = _panel_pages(page, f"/agents/{AGENT}")
        expect(page.locator("h1")).not_to_have_text("Sign in")
        assert not any(BOB_CANARY in text or ALICE_CANARY in text for text in level_pages)


def test_forget_a_user_behind_a_confirmation(page: Page, panel: Panel) -> None:
    sign_in(page, panel.operator)
    page.goto(f"/agents/{AGENT}#forget")
    page.select_option("#forget-user", "bob")
    page.fill("#forget-confirm", "alice")  # not the same name: refused
    page.click("text=Forget this user everywhere")
    expect(page.locator(".flash.error")).to_contain_text("type the user's name again")
    page.goto(f"/agents/{AGENT}?user=bob#forget")
    expect(page.locator("#turns")).to_contain_text(BOB_CANARY)
    page.select_option("#forget-user", "bob")
    page.fill("#forget-confirm", "bob")
    shot(page, "07-forget-confirm")
    page.click("text=Forget this user everywhere")
    expect(page.locator(".flash")).to_contain_text("Forgot bob")
    expect(page.locator("main")).not_to_contain_text(BOB_CANARY)
    expect(page.locator("#view-user option", has_text="bob")).to_have_count(0)
    page.goto(f"/agents/{AGENT}?user=alice")
    expect(page.locator("#turns")).to_contain_text("alice")
    shot(page, "08-forgotten")


def test_forms_without_the_csrf_token_are_refused(page: Page, panel: Panel) -> None:
    sign_in(page, panel.operator)
    expect(page.locator("h1")).to_have_text("Agents")
    # the session cookie rides along, the token does not: refused, nothing forgotten
    response = page.request.post(f"/agents/{AGENT}/forget", form={"user": "alice", "confirm": "alice"})
    assert response.status == 403
    page.goto(f"/agents/{AGENT}?user=alice")
    expect(page.locator("#turns")).to_contain_text(ALICE_CANARY)


def test_agent_key_sees_its_agent_without_operator_actions(page: Page, panel: Panel) -> None:
    sign_in(page, panel.agent_key)
    expect(page.locator("h1")).to_have_text(AGENT)
    expect(page.locator("#forget")).to_have_count(0)
    expect(page.locator("#viewing")).to_contain_text("agent-level memory only")
    page.goto(f"/agents/{AGENT}?user=alice")  # no user to pick: refused, nothing of alice shown
    expect(page.locator(".flash.error")).to_contain_text("agent-level memory only")
    assert ALICE_CANARY not in page.content()
    page.goto("/agents/billing-bot")
    expect(page.locator(".flash.error")).to_contain_text("reaches only agent")
