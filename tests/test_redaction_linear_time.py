"""An attacker cannot stall memplane with text built to make a secret rule backtrack.

Before RE2, `aws_secret` + 1,000 spaces + `!` took 5.7 s to scan and froze every agent's
`/healthz` for 8.5 s. Times here are ratios against scanning ordinary text of the same size in
the same run (linear rules stay within a small factor; backtracking rules are off by 100-10,000x),
never wall-clock limits."""

from __future__ import annotations

import asyncio
import string
import time

import aiohttp
from aiohttp import web
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memplane_core.redact import Redactor, builtin_rules
from tests.conftest import url_of

SIZE = 100_000
ORDINARY = ("We met on Tuesday to plan the quarterly review; Ana will send the slides and the budget "
            "numbers by Friday, and the api rollout moves to next sprint. ")


def _fit(chunk: str, size: int = SIZE) -> str:
    return (chunk * (size // max(1, len(chunk)) + 1))[:size]


HOSTILE = {  # what the review sent, each built at a given size (100 KB in the tests)
    "aws_secret + spaces + !": lambda n: "aws_secret" + " " * (n - 11) + "!",
    "session_token + spaces + !": lambda n: "session_token" + " " * (n - 14) + "!",
    "twilio token + spaces": lambda n: "twilio token" + " " * (n - 13) + "!",
    "password is + dots": lambda n: "password is " + "." * (n - 12),
    "A_ + TOKEN x 20000": lambda n: "A_" + "TOKEN" * (n // 5),
    "a. x 50000 + ://": lambda n: "a." * (n // 2) + "://",
    "3,125 PEM BEGIN lines": lambda n: "-----BEGIN RSA PRIVATE KEY-----\n" * (n // 32),
    # thousands of candidate matches on one line: each match's allowlist check sees a bounded window
    "3,700 keyed values on one line": lambda n: " ".join("auth_code=Qz%05dxLm4vN8pT" % i for i in range(n // 27)),
    # an AWS key id followed by a secret-shaped run, thousands of times on one line
    "1,400 key ids + base64 runs": lambda n: _fit("AKIAQWERTYUIOPASDFGH / " + "aB3/" * 12 + " ", n),
    # cut keys (issue 39): one 100 KB key body with no header, short base64 words one per line, the
    # same with escaped line breaks, and thousands of headers each followed by a fragment
    "headerless key body": lambda n: _fit("Zm9vYmFyQmF6cXV4MTIzNDU2Nzg5MGFiY2RlZkdISUpLTE1OT1BRUlNUVVZXWFla+/0\n", n),
    "base64 words, one per line": lambda n: _fit("aB3d\n", n),
    "escaped line breaks": lambda n: _fit("MIIEvQ7b\\n", n),
    "PEM headers + fragments": lambda n: _fit("-----BEGIN PRIVATE KEY-----\nab3\n", n),
}


def _best_of(fn, n: int = 3) -> float:
    """The fastest of n runs in CPU time of this process: other processes sharing the machine
    slow the wall clock, not the work the scan does."""
    best = float("inf")
    for _ in range(n):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return max(best, 1e-6)


def _scan_all(redactor: Redactor, text: str) -> None:
    redactor._scan(text, __import__("collections").Counter())  # no memo: every scan is real


def _literal_prefixes(rule) -> list[str]:
    """Adversarial chunks from a rule's own keywords: the keyword repeated, followed by runs of
    separators, quotes, word characters, or cut off just before a value."""
    out = []
    for k in rule.keywords or ("",):
        out += [k, k + " ", k + "=", k + "_", k + ":" + " " * 30, k + "'\"" * 8, k + "a1" * 20, k + "-" * 40]
    return out


def test_the_reviewed_inputs_scan_as_fast_as_ordinary_text():
    redactor = Redactor()
    ordinary = _fit(ORDINARY)
    base = _best_of(lambda: _scan_all(redactor, ordinary))
    slow, growth = {}, {}
    for name, build in HOSTILE.items():
        text, quarter = build(SIZE), build(SIZE // 4)
        assert len(text) >= SIZE - 100
        for runs in (2, 5):  # a reading near a line (or a busy machine's) is measured again, carefully
            took = _best_of(lambda t=text: _scan_all(redactor, t), runs)
            slow[name] = took / base
            growth[name] = took / _best_of(lambda t=quarter: _scan_all(redactor, t), runs)
            if slow[name] < 500 and growth[name] < 7:
                break
    print({k: round(v, 1) for k, v in slow.items()}, {k: round(v, 1) for k, v in growth.items()})
    # Each scan costs a small multiple of ordinary text (1-2x; 3,125 stacked PEM headers are 781
    # matches, each checked: ~50x, more on a loaded machine); with Python's backtracking engine the
    # first of these took ~100,000x longer already at 1 KB, and 4x the input cost 100x the time.
    assert max(slow.values()) < 1000, slow
    assert max(growth.values()) < 9, growth


def test_every_rule_is_linear_on_text_built_from_its_own_prefixes():
    """Each rule alone, on 100 KB made of its keywords plus separators: the largest chunk cost,
    as a ratio of that rule on ordinary text, stays small, and doubling the input at most
    roughly doubles the time (a quadratic rule would quadruple it)."""
    worst = []
    ordinary_small = _fit(ORDINARY, SIZE // 4)
    for rule in builtin_rules():
        single = Redactor(rules=(rule,))
        base = _best_of(lambda: _scan_all(single, ordinary_small), 2) + 1e-4
        for chunk in _literal_prefixes(rule):
            quarter = _fit(chunk, SIZE // 4)
            took = _best_of(lambda t=quarter: _scan_all(single, t), 1)
            if took / base > 20:  # only a slow-looking case is worth a scaling check
                full = _fit(chunk, SIZE)
                ratio = _growth(single, full, quarter, 1)
                if ratio >= 7:  # a reading near the line (or a busy machine's) is measured again, carefully
                    ratio = _growth(single, full, quarter, 5)
                worst.append((rule.kind, chunk[:20], round(ratio, 1)))
    # 4x the input: linear is ~4x, quadratic ~16x
    assert all(ratio < 9 for *_, ratio in worst), worst


def _growth(redactor: Redactor, full: str, quarter: str, n: int) -> float:
    return _best_of(lambda: _scan_all(redactor, full), n) / _best_of(lambda: _scan_all(redactor, quarter), n)


_PIECES = sorted({k for r in builtin_rules() for k in r.keywords if len(k) <= 12} |
                 {" ", "\t", "\n", "=", ":", "'", '"', "`", "(", ")", "[", "]", "{", "}", ".", "-", "_", "/",
                  "@", "://", "is", "was", "-----BEGIN", "PRIVATE KEY-----", "<add key=\"", "value=\""})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(string.ascii_letters + string.digits, max_size=6)),
                min_size=1, max_size=10))
@example(["glft-"])  # found by this test: every 25 characters a token-shaped match (low entropy, rejected)
def test_generated_hostile_text_scans_in_linear_time(pieces):
    """A chunk that is a rule's whole match (`glft-` x 5 is a GitLab feed token's shape) makes
    ~4,000 matches per 100 KB, each checked: ~100x ordinary text, and more on a loaded machine.
    That is linear work, so a slow-looking case must also scale linearly: 4x the text at most
    ~4x the time (a backtracking rule is off by 100-10,000x and grows 16x or more)."""
    redactor = Redactor()
    chunk = "".join(pieces) or "x"
    ordinary = _fit(ORDINARY)
    base = _best_of(lambda: _scan_all(redactor, ordinary), 2)
    full = _fit(chunk)
    took = _best_of(lambda: _scan_all(redactor, full), 1)
    assert took / base < 1000, (pieces, took / base)
    if took / base > 50:
        quarter = _fit(chunk, SIZE // 4)
        growth = _best_of(lambda: _scan_all(redactor, full), 2) / _best_of(lambda: _scan_all(redactor, quarter), 2)
        assert growth < 9, (pieces, growth)


# -- end to end: one agent's hostile message does not stall another agent --

async def test_a_hostile_message_does_not_stall_another_agents_healthz(stack):
    async def recall(request):
        return web.json_response({"memories": [{"text": "aws_secret" + " " * 2000 + "!", "kind": "fact"}]})

    async def retain(request):
        await request.read()
        return web.json_response({"status": "stored"}, status=202)

    app = web.Application()
    app.router.add_post("/recall", recall)
    app.router.add_post("/retain", retain)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    stack.add_agent("mallory", f"http://127.0.0.1:{port}")
    hostile = " ".join(["aws_secret" + " " * 2000 + "!", "session_token" + " " * 2000 + "!",
                        "password is " + "." * 2000, "A_" + "TOKEN" * 400, "a." * 1000 + "://"])

    async def healthz_latencies(s, n):
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.get(f"{stack.proxy_url}/healthz") as r:
                assert r.status == 200
            out.append(time.perf_counter() - t0)
            await asyncio.sleep(0.01)
        return out

    try:
        async with aiohttp.ClientSession() as s:
            baseline = sorted(await healthz_latencies(s, 20))
            client = stack.openai("mallory")
            attack = asyncio.gather(*(client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": hostile}]) for _ in range(4)))
            during = await healthz_latencies(s, 20)
            answers = await attack
            await stack.settle()
        assert all(a.choices for a in answers)  # the attacker's own requests are served too
        median = baseline[len(baseline) // 2]
        # the old regexes held the loop for seconds per message; a linear scan costs microseconds
        assert max(during) < 1.0 + 20 * median, (median, during)
    finally:
        await runner.cleanup()


# -- a REST memory's key and metadata are redacted as well as its value --

async def _rest_store(url, body):
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/api/memories", json=body) as r:
            assert r.status in (200, 201), await r.text()
            stored = await r.json()
        async with s.get(f"{url}/api/memories/{stored['id']}") as r:
            return await r.json()


GH = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"


async def _check_key_and_metadata_redacted(url):
    got = await _rest_store(url, {"agent_id": "carol", "key": f"deploy token {GH}", "value": f"uses {GH}",
                                  "metadata": {"note": f"rotate {GH}", "password": "Zq8uN2vLm4xT",
                                               "nested": [{"url": "postgres://app:Zq8uN2vLm4@db/prod"}]}})
    text = str(got)
    assert GH not in text and "Zq8uN2vLm4" not in text
    assert got["key"] == "deploy token [redacted:github]" and got["value"] == "uses [redacted:github]"
    assert got["metadata"]["note"] == "rotate [redacted:github]"
    assert got["metadata"]["password"] == "[redacted:secret_field]"


async def test_a_rest_memorys_key_and_metadata_are_redacted_embedded(aiohttp_server, tmp_path):
    import io

    from memory_adapters.embedded.app import build_embedded_app
    from memplane_core.telemetry import Telemetry, make_logger
    app = build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                             embeddings="off")
    server = await aiohttp_server(app)
    await _check_key_and_metadata_redacted(url_of(server))


async def test_a_rest_memorys_key_and_metadata_are_redacted_tiered(tiered):
    url, _ = tiered
    await _check_key_and_metadata_redacted(url)


async def test_a_large_document_is_scanned_off_the_event_loop():
    """The async entry points hand a large document to a worker thread: the loop keeps ticking
    while it is scanned, and the result is the one the synchronous scan gives."""
    redactor = Redactor()
    gh = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    doc = {"messages": [{"role": "user", "content": f"line {i}: deploy with {gh} and password=Zq8uN2vLm4xT\n" * 40}
                        for i in range(50)]}  # ~150 KB, 18x the size scanned on a worker thread
    assert Redactor.is_large(doc)
    ticks = 0
    stop = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    scanned, counts = await redactor.json_async(doc)
    during = ticks - before
    stop.set()
    await task
    assert during > 1  # the loop ran other work while the document was scanned
    assert scanned == Redactor().json(doc)[0] and gh not in str(scanned)
    assert counts["github"] == 50 * 40 and counts["credential_assignment"] == 50 * 40
    small, found = await redactor.text_async(f"short {gh}")
    assert small == "short [redacted:github]" and found == {"github": 1}
