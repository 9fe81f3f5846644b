"""An operator curates an agent's memories in a real headless browser (Debian's chromium): finds
them by kind, opens one, corrects its text, pins it, forgets another with a reason, reads the audit
trail, follows a memory to the turn it came from, and sees hostile memory text as text. The agent's
next turn gets the corrected, pinned memory. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import aiohttp

from memory_adapters.embedded.app import build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of
from tests.test_inspector_page import open_browser, pytestmark  # noqa: F401 - skipped without chromium

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'


def go(browser, element) -> None:
    """Click, and wait for the next page (a click that loads one leaves the old page stale)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    old = browser.find_element("tag name", "html")
    element.click()

    def left(_) -> bool:
        try:
            old.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:  # chromium, mid-navigation: the old node's document is gone
            if "does not belong to the document" in str(exc):
                return True
            raise

    WebDriverWait(browser, 15).until(left)


def curate(base: str, shots: Path) -> dict:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser = open_browser(shots)
    seen: dict = {}
    try:
        browser.implicitly_wait(5)
        browser.set_window_size(1400, 1100)  # the screenshots show whole tables
        browser.get(base + "/memplane/ui/login")
        browser.find_element(By.ID, "token").send_keys("curator-admin-token")
        go(browser, browser.find_element(By.ID, "login"))
        go(browser, browser.find_element(By.LINK_TEXT, "ui-agent"))
        seen["all_rows"] = browser.find_element(By.ID, "memories").text
        seen["title"] = browser.title
        browser.save_screenshot(str(shots / "memories.png"))
        # only the episodes: keys read as when they were said
        Select(browser.find_element(By.ID, "kind")).select_by_visible_text("episode")
        go(browser, browser.find_element(By.ID, "search"))
        seen["episode_keys"] = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#memories td.mkey")]
        # an episode's source turn: its conversation
        go(browser, browser.find_element(By.CSS_SELECTOR, "#memories td.source-turns a"))
        seen["source_user"] = browser.find_element(By.ID, "said-user").text
        seen["source_url"] = browser.current_url
        browser.save_screenshot(str(shots / "source-turn.png"))
        browser.get(base + "/memplane/ui/agents/ui-agent")
        # correct the badge number
        go(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "badge"))
        text = browser.find_element(By.ID, "edit-value")
        text.clear()
        text.send_keys("Alice's badge number is 4712")
        browser.find_element(By.ID, "edit-importance").clear()
        browser.find_element(By.ID, "edit-importance").send_keys("0.9")
        browser.find_element(By.ID, "edit-reason").send_keys("typo in the number")
        go(browser, browser.find_element(By.ID, "save"))
        seen["saved"] = browser.find_element(By.ID, "notice").text
        seen["text_after"] = browser.find_element(By.ID, "m-text").text
        go(browser, browser.find_element(By.ID, "pin"))
        seen["pinned"] = browser.find_element(By.ID, "m-pinned").text
        seen["audit"] = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#audit tr.audit-entry")]
        browser.save_screenshot(str(shots / "edited.png"))
        # forget the tea preference with a reason
        go(browser, browser.find_element(By.LINK_TEXT, "ui-agent"))
        go(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "drink"))
        browser.find_element(By.ID, "forget-reason").send_keys("she asked us to forget it")
        go(browser, browser.find_element(By.ID, "forget"))
        seen["forgot"] = browser.find_element(By.ID, "notice").text
        seen["rows_after"] = browser.find_element(By.ID, "memories").text
        go(browser, browser.find_element(By.ID, "audit-link"))
        seen["agent_audit"] = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#audit tr.audit-entry")]
        browser.save_screenshot(str(shots / "audit.png"))
        seen["final_title"] = browser.title
    finally:
        browser.quit()
    return seen


async def test_an_operator_corrects_pins_and_forgets_memories_and_the_agent_notices(make_stack, aiohttp_server,
                                                                                     tmp_path):
    stack = await make_stack(admin_token="curator-admin-token")
    stack.provider.reply = lambda body: "Sure."
    memory = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(), embeddings="off",
                                                     telemetry=Telemetry(make_logger(io.StringIO()))))
    # a curation story, not a latency one: a recall budget a CI host running chromium beside other
    # test workers keeps (at the default 300 ms the last turn's recall once came back empty there)
    stack.tokens["ui-agent"] = stack.add_agent("ui-agent", url_of(memory), service="embedded",
                                               recall={"path": "/recall", "timeout_ms": 3000})
    client = stack.openai("ui-agent")
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "My cat is called Miso."}])
    await stack.settle()
    async with aiohttp.ClientSession() as s:
        for key, value in (("badge", "Alice's badge number is 4711"), ("drink", "Alice prefers green tea"),
                           ("<b>note</b>", HOSTILE)):
            async with s.post(url_of(memory) + "/api/memories",
                              json={"agent_id": "ui-agent", "key": key, "value": value, "type": "preference"}) as r:
                assert r.status == 201

    seen = await asyncio.to_thread(curate, stack.proxy_url, tmp_path)

    assert HOSTILE in seen["all_rows"] and "<b>note</b>" in seen["all_rows"]  # shown as text, never run
    assert "pwned" not in seen["title"] and "pwned" not in seen["final_title"]
    assert seen["episode_keys"] and all(k.startswith("episode said 20") for k in seen["episode_keys"])
    assert "My cat is called Miso." in seen["source_user"] and "/memplane/ui/turns/turn_" in seen["source_url"]
    assert seen["saved"] == "Saved." and seen["text_after"] == "Alice's badge number is 4712"
    assert seen["pinned"] == "yes"
    pin, edit = seen["audit"]
    assert "inspector session" in pin and "pin" in pin
    assert "typo in the number" in edit and "4711" in edit and "4712" in edit and "importance" in edit
    assert seen["forgot"] == "Forgotten." and "green tea" not in seen["rows_after"]
    assert "she asked us to forget it" in seen["agent_audit"][0] and "forget" in seen["agent_audit"][0]
    assert len(seen["agent_audit"]) == 3
    for shot in ("memories.png", "source-turn.png", "edited.png", "audit.png"):
        assert (tmp_path / shot).stat().st_size > 1000

    # the agent's next turn: the pinned, corrected memory is in the block though the question is about the cat
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is my cat called?"}])
    block = stack.provider.received[-1].memories_block
    assert "4712" in block and "4711" not in block and "Miso" in block and "green tea" not in block
