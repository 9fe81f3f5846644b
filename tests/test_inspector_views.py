"""What an operator sees at a glance, in a real headless chromium at laptop and phone sizes: per
agent, memories over time and by kind, recall latency and status over the last hours (server-drawn
SVG with titles), what a turn recalled and why, and what the curator changed. The pages fit a
phone without sideways scrolling, every control has a label, focus is visible, long ids are short
(whole in their tooltip), and no page carries a script. Full-page screenshots of each page, at
both sizes, go to tests/artifacts/inspector/ (gitignored) for a person to look at."""

from __future__ import annotations

import asyncio
import base64
import io
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp

from memory_adapters.embedded.app import build_embedded_app
from memplane_cli.runner import free_port
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of
from tests.test_inspector_page import open_browser, pytestmark  # noqa: F401 - skipped without chromium

ARTIFACTS = Path(__file__).parent / "artifacts" / "inspector"
SIZES = {"laptop": (1280, 860), "phone": (390, 844)}
LONG_HEX = re.compile(r"[0-9a-f]{24,}")

UNLABELLED = """return [...document.querySelectorAll('input:not([type=hidden]),select,textarea,button')]
  .filter(e => !((e.labels && e.labels.length) || e.getAttribute('aria-label') || (e.tagName == 'BUTTON' && e.innerText.trim())))
  .map(e => e.outerHTML.slice(0, 80));"""
CHARTS = """return [...document.querySelectorAll('svg.chart')].map(s => ({
  id: s.id, role: s.getAttribute('role'), title: (s.querySelector('title') || {}).textContent || '',
  named: (s.getAttribute('aria-labelledby') || '').split(' ').every(i => document.getElementById(i)),
  desc: (s.querySelector('desc') || {}).textContent || '', marks: s.querySelectorAll('rect,circle,path').length}));"""


def shoot(browser, path: Path) -> None:
    """The whole page, not only the window (chromium's DevTools protocol)."""
    width, height = browser.execute_script(
        "return [window.innerWidth, document.documentElement.scrollHeight]")  # the window, scrollbar and all
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))


def look(base: str, pages: dict[str, str]) -> dict:
    """Log in, then open each page at each size: what the person sees, and a screenshot."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser = open_browser(ARTIFACTS.parent)
    seen: dict = {}
    try:
        browser.implicitly_wait(5)
        browser.get(base + "/memplane/ui/login")
        browser.find_element(By.ID, "token").send_keys("views-admin-token")
        browser.find_element(By.ID, "login").click()
        browser.find_element(By.ID, "agents")
        for size, (w, h) in SIZES.items():
            browser.set_window_size(w, h)
            for name, path in pages.items():
                browser.get(base + path)
                body = browser.find_element(By.TAG_NAME, "body")
                page = {
                    "text": body.text, "html": browser.page_source, "title": browser.title,
                    "overflow": browser.execute_script(
                        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"),
                    "unlabelled": browser.execute_script(UNLABELLED), "charts": browser.execute_script(CHARTS),
                    "scripts": browser.execute_script("return document.scripts.length"),
                    "id_titles": browser.execute_script(
                        "return [...document.querySelectorAll('.id[title]')].map(e => e.title)")}
                shoot(browser, ARTIFACTS / f"{size}-{name}.png")
                body.send_keys(Keys.TAB)  # the first stop: the skip link, with a visible focus ring
                page["first_focus"] = browser.execute_script(
                    "const e = document.activeElement, s = getComputedStyle(e);"
                    "return [e.className, e.textContent, s.outlineStyle, s.outlineWidth]")
                seen[(size, name)] = page
    finally:
        browser.quit()
    return seen


async def test_an_operator_sees_each_agents_memory_and_recall_at_a_glance_on_a_laptop_and_a_phone(
        make_stack, aiohttp_server, tmp_path):
    stack = await make_stack(admin_token="views-admin-token")
    stack.provider.reply = lambda body: "Sure."
    memory = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(), embeddings="off",
                                                     telemetry=Telemetry(make_logger(io.StringIO()))))
    stack.tokens["ui-agent"] = stack.add_agent("ui-agent", url_of(memory), service="embedded",
                                               recall={"path": "/recall", "timeout_ms": 3000})
    # a second agent whose memory service is down: its recalls fail, and the charts say so
    stack.tokens["offline-agent"] = stack.add_agent("offline-agent", f"http://127.0.0.1:{free_port()}",
                                                    recall={"path": "/recall", "timeout_ms": 500})
    # memories made over the last days (an export restored), some by the curator, one superseded
    now = datetime.now(timezone.utc)
    async with aiohttp.ClientSession() as s:
        for i, (kind, key, value, meta) in enumerate((
                ("directive", "units", "Always answer in metric units.", {"curator": {"model": "curator-llm"}}),
                ("fact", "home", "The user lives in Lisbon.", {"curator": {"model": "curator-llm"}}),
                ("fact", "home-old", "The user lives in Porto.", {"superseded_by": "fact:" + "ab12" * 16}),
                ("preference", "drink", "Prefers green tea.", {}),
                ("preference", "editor", "Uses vim keybindings.", {}),
                ("constraint", "budget", "Never spend over 20 EUR without asking.", {}))):
            body = {"agent_id": "ui-agent", "key": key, "value": value, "type": kind, "metadata": meta,
                    "created_at": (now - timedelta(days=5 - i, hours=i)).isoformat()}
            async with s.post(url_of(memory) + "/api/memories", json=body) as r:
                assert r.status == 201, await r.text()
        async with s.get(url_of(memory) + "/api/memories", params={"agent_id": "ui-agent"}) as r:
            tea = next(m for m in (await r.json())["memories"] if m["key"] == "drink")
        async with s.patch(url_of(memory) + f"/api/memories/{tea['id']}",
                           json={"value": "Prefers green tea, no sugar.", "reason": "she said so"}) as r:
            assert r.status == 200, await r.text()
    client = stack.openai("ui-agent")
    for said in ("My cat is called Miso.", "I work on the memplane repo.", "What is my cat called?"):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": said}])
        await stack.settle()
    for _ in range(2):
        await stack.openai("offline-agent").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}])
    turn = stack.state.explanations.recent("ui-agent", limit=1)[0]
    assert turn["recall"]["blocks"] >= 1
    pages = {"agents": "/memplane/ui/", "agent": "/memplane/ui/agents/ui-agent",
             "offline-agent": "/memplane/ui/agents/offline-agent", "turn": f"/memplane/ui/turns/{turn['turn_id']}",
             "memory": f"/memplane/ui/agents/ui-agent/memories/{tea['id']}",
             "audit": "/memplane/ui/agents/ui-agent/audit"}

    seen = await asyncio.to_thread(look, stack.proxy_url, pages)

    for (size, name), page in seen.items():
        where = f"{size} {name}"
        assert page["overflow"] <= 0, f"{where}: the page scrolls sideways by {page['overflow']}px"
        assert page["unlabelled"] == [], f"{where}: controls without a label {page['unlabelled']}"
        assert page["scripts"] == 0, where
        assert not LONG_HEX.search(page["text"]), f"{where}: a long hash is shown: {LONG_HEX.search(page['text'])}"
        assert page["first_focus"][0] == "skip" and page["first_focus"][2] != "none", where
        for chart in page["charts"]:
            assert chart["role"] == "img" and chart["title"] and chart["desc"] and chart["named"], (where, chart)
        assert (Path(ARTIFACTS) / f"{size}-{name}.png").stat().st_size > 5000

    agents = seen[("laptop", "agents")]
    assert "ui-agent" in agents["text"] and "offline-agent" in agents["text"]
    assert {c["id"] for c in agents["charts"]} == {"recall-status", "recall-latency"}
    status = next(c for c in agents["charts"] if c["id"] == "recall-status")
    assert re.search(r"\d+ succeeded", status["desc"]) and re.search(r"[1-9]\d* failed", status["desc"])

    agent = seen[("laptop", "agent")]
    charts = {c["id"]: c for c in agent["charts"]}
    assert set(charts) == {"recall-status", "recall-latency", "memories-over-time", "memories-by-kind"}
    assert "2 preference" in charts["memories-by-kind"]["desc"] and "1 directive" in charts["memories-by-kind"]["desc"]
    assert charts["memories-over-time"]["marks"] >= 2 and re.match(r"\d+ memories", charts["memories-over-time"]["desc"])
    assert "0 failed" in charts["recall-status"]["desc"] and "Median" in charts["recall-latency"]["desc"]
    # what the curator changed, and what an operator changed
    assert "Always answer in metric units." in agent["text"] and "The user lives in Lisbon." in agent["text"]
    assert "superseded by fact:ab12ab12ab" in agent["text"] and "she said so" in agent["text"]
    assert "fact:" + "ab12" * 16 in agent["id_titles"]  # the whole id in the tooltip
    assert any(len(t) == len("turn_") + 24 and t.startswith("turn_") for t in agent["id_titles"])

    offline_page = seen[("laptop", "offline-agent")]
    offline = {c["id"]: c for c in offline_page["charts"]}
    assert re.search(r"[1-9] failed", offline["recall-status"]["desc"])
    assert "memories-by-kind" not in offline  # a service that does not answer is said, not drawn as zero
    assert "The memory service did not answer" in offline_page["text"]

    turn_page = seen[("phone", "turn")]
    assert "injected" in turn_page["text"] and "Miso" in turn_page["text"]  # what it recalled and why
    assert "What is my cat called?" in turn_page["text"]
