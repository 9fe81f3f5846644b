"""A secret is redacted wherever it is cut, and the redaction shows in the block.

Memory text is cut all the time (a snippet packed to the budget, an episode split in pieces, a paste
that stops halfway), and coding agents paste whole files into turns as tool results. These tests put
a memory service behind the real proxy that keeps whatever it is sent and gives it back verbatim:
anything secret the provider then reads, the proxy let through."""

from __future__ import annotations

import base64
import json
import random

import pytest
from aiohttp import web

from memplane_core.redact import Redactor
from proxy.inject import drop_repeated_lines
from proxy.recall_policy import InjectedMemory
from tests.conftest import url_of

RNG = random.Random(39)


def _pem(label: str, width: int, lines: int = 10) -> tuple[str, list[str]]:
    raw = base64.b64encode(RNG.randbytes(width * lines * 3 // 4 - 5)).decode()
    body = [raw[i:i + width] for i in range(0, len(raw), width)]
    return f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----", body


KEYS = [_pem("RSA PRIVATE KEY", 64), _pem("OPENSSH PRIVATE KEY", 70), _pem("PRIVATE KEY", 64)]
WINDOW = 40  # no run of this many key characters may reach the provider


def _windows(body: list[str]) -> set[str]:
    return {line[i:i + WINDOW] for line in body for i in range(len(line) - WINDOW + 1)}


def _leaks(text: str, body: list[str]) -> list[str]:
    return [w for w in _windows(body) if w in text]


def _cuts(key: str) -> list[str]:
    """The paste cut at every pair of line boundaries, and at random character offsets."""
    text = f"here is the deploy key:\n{key}\nthanks, it is the prod one"
    lines = text.split("\n")
    cuts = ["\n".join(lines[i:j]) for i in range(len(lines)) for j in range(i + 1, len(lines) + 1)]
    for _ in range(60):
        a = RNG.randrange(len(text))
        cuts.append(text[a:RNG.randrange(a + 1, len(text) + 1)])
    return cuts


class KeepsEverything:
    """A memory service that stores what it is sent, verbatim, and serves `serve` on recall."""

    def __init__(self) -> None:
        self.retained: list[dict] = []
        self.recalls: list[dict] = []
        self.serve: list[str] = []

    def app(self) -> web.Application:
        async def retain(request: web.Request) -> web.Response:
            self.retained.append(await request.json())
            return web.json_response({"status": "stored"}, status=202)

        async def recall(request: web.Request) -> web.Response:
            self.recalls.append(await request.json())
            return web.json_response({"memories": [{"text": t, "kind": "episode"} for t in self.serve]})

        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/retain", retain)
        app.router.add_post("/recall", recall)
        return app


@pytest.fixture
async def keeper(aiohttp_server):
    service = KeepsEverything()
    server = await aiohttp_server(service.app())
    return service, url_of(server)


@pytest.mark.parametrize("key, body", KEYS, ids=["rsa", "openssh", "pkcs8"])
def test_a_key_cut_anywhere_loses_every_line_and_leaves_a_marker(key, body):
    redactor = Redactor()
    for cut in _cuts(key):
        for form in (cut, json.dumps(cut)[1:-1]):  # as written, and inside a JSON string read as text
            out, counts = redactor.text(form)
            assert not _leaks(out, body), (form, out)
            if _leaks(form, body):
                assert "[redacted:private_key]" in out and counts["private_key"] >= 1


async def test_no_line_of_a_cut_key_reaches_the_provider_or_the_memory_service(stack, keeper):
    """Every cut goes in as a turn (retain) and comes back as a recalled memory in the block the
    way the engine files it — under a date line, followed by a blank line and the next run."""
    service, url = keeper
    stack.add_agent("deployer", url)
    client = stack.openai("deployer")
    key, body = KEYS[0]
    cuts = [c for c in _cuts(key) if _leaks(c, body)]
    for n, cut in enumerate(cuts[::3]):
        service.serve = [f"[2026-11-20]\nuser: here is part of the deploy key:\n{cut}\n\n[2026-11-21]\n"
                         f"assistant: noted ({n})"]
        await client.chat.completions.create(model="m", messages=[
            {"role": "user", "content": f"keep this safe:\n{cut}\nwhere do I put it?"}])
        block = stack.provider.received[-1].memories_block
        assert block is not None and not _leaks(block, body), (cut, block)
        assert "[redacted:" in block and "here is part of the deploy key:" in block, block
        assert f"noted ({n})" in block
    await stack.settle()
    sent = json.dumps(service.retained) + json.dumps(service.recalls)
    assert len(service.retained) == len(cuts[::3]) and not _leaks(sent, body)
    assert "[redacted:private_key]" in sent


def test_a_redaction_marker_and_bracketed_notes_survive_the_blocks_line_filter():
    mems = [InjectedMemory("[2026-11-20]\nuser: here is the deploy key:\n[redacted:private_key]\n\n[2026-11-21]\n"
                           "assistant: stored it"),
            InjectedMemory("[1:56 pm on 8 May, 2023]\nuser: the other key:\n[redacted:private_key]\n\n[DONE]\n\n"
                           "[x] rotate keys\n[ ] tell ops\n[2026-11-22]")]
    kept, _ = drop_repeated_lines(mems)
    assert kept[0].text == mems[0].text
    # the second memory's marker is its own statement, not a repeat; the date line with nothing
    # under it goes, `[DONE]` and the checklist stay
    assert kept[1].text == ("[1:56 pm on 8 May, 2023]\nuser: the other key:\n[redacted:private_key]\n\n[DONE]\n\n"
                            "[x] rotate keys\n[ ] tell ops")


ENV_SECRETS = {
    "url_password": "Qw8rT5yU2iO9pLk",
    "stripe": "sk_live_" + "51HxQ2eLkd8f7G3hJ9kL0mN2p",
    "aws_id": "AKIA" + "Q7ZP4M2K9XW3VN5T",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYz8Q2vKp3Lm",
    "github": "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6",
    "jwt_secret": "8f3kL9mQ2xV7bN4cZ1wR6tY0",
    "npm": "npm_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
}
ENV_FILE = (f"# .env\nDATABASE_URL=postgres://app:{ENV_SECRETS['url_password']}@db.internal:5432/prod\n"
            f"STRIPE_SECRET_KEY={ENV_SECRETS['stripe']}\nAWS_ACCESS_KEY_ID={ENV_SECRETS['aws_id']}\n"
            f"AWS_SECRET_ACCESS_KEY={ENV_SECRETS['aws_secret']}\nGITHUB_TOKEN={ENV_SECRETS['github']}\n"
            f"JWT_SECRET={ENV_SECRETS['jwt_secret']}\n//registry.npmjs.org/:_authToken={ENV_SECRETS['npm']}\n"
            "DEBUG=false\nPORT=8080\nTLS_KEY=\"" + KEYS[2][0].split("-----END")[0].replace("\n", "\\n") + "\"\n")
SECRETS = list(ENV_SECRETS.values())
TOOLS_OA = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
TOOLS_AN = [{"name": "read_file", "description": "read a file", "input_schema": {"type": "object"}}]
TOOLS_RESP = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]


def _plain_leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text] + _leaks(text, KEYS[2][1])


async def _openai_tool_turn(stack, agent):
    await stack.openai(agent).chat.completions.create(model="m", tools=TOOLS_OA, messages=[
        {"role": "user", "content": "read my .env"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": ".env"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": ENV_FILE},
        {"role": "assistant", "content": "I read it."},
        {"role": "user", "content": "which database does the app use?"}])


async def _anthropic_tool_turn(stack, agent):
    await stack.anthropic(agent).messages.create(model="c", max_tokens=50, tools=TOOLS_AN, messages=[
        {"role": "user", "content": "read my .env"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file",
                                           "input": {"path": ".env"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": ENV_FILE}]}]},
        {"role": "assistant", "content": "I read it."},
        {"role": "user", "content": "which database does the app use?"}])


async def _responses_tool_turn(stack, agent):
    await stack.openai(agent).responses.create(model="m", tools=TOOLS_RESP, input=[
        {"role": "user", "content": "read my .env"},
        {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": '{"path": ".env"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": ENV_FILE},
        {"role": "assistant", "content": "I read it."},
        {"role": "user", "content": "which database does the app use?"}])


@pytest.mark.parametrize("turn", [_openai_tool_turn, _anthropic_tool_turn, _responses_tool_turn],
                         ids=["openai-tool", "anthropic-tool_result", "responses-function_call_output"])
async def test_a_pasted_env_file_in_a_tool_result_never_reaches_memory_or_a_later_block(stack, keeper, turn):
    service, url = keeper
    stack.add_agent("coder", url)
    await turn(stack, "coder")
    await stack.settle()
    assert service.retained and service.recalls
    stored = json.dumps(service.retained) + json.dumps(service.recalls)
    assert not _plain_leaks(stored)
    assert "[redacted:" in stored and "DEBUG=false" in stored and "PORT=8080" in stored
    # the service gives back every string it was sent; the next turn's block shows only markers
    strings: list[str] = []

    def collect(v):
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, list):
            for x in v:
                collect(x)
        elif isinstance(v, dict):
            for x in v.values():
                collect(x)
    # what retain sends is compacted (a tool's output is one line, proxy/coding/for_memory.py); the
    # recall request still carries the whole redacted file: give back what both held
    collect([r["entry"] for r in service.retained] + service.recalls)
    service.serve = [s for s in strings if "[redacted:" in s][:4]
    await stack.openai("coder").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "what was in my .env?"}])
    block = stack.provider.received[-1].memories_block
    assert block is not None and "[redacted:" in block and not _plain_leaks(block)


PEM_BODY = KEYS[2][1]
SA_JSON_TEXT = ('{\n  "type": "service_account",\n  "project_id": "acme-prod",\n  "private_key_id": "'
                + "3f9a1c0b7e2d4a6f8b1c3e5d7f9a0b2c4d6e8f01" + '",\n  "private_key": "-----BEGIN PRIVATE KEY-----\\n'
                + "\\n".join(PEM_BODY[:4]) + '\\n')  # cut inside the key, as a snippet would be


@pytest.mark.parametrize("text, secrets", [
    (f"user: {PEM_BODY[3]}\nassistant: got it", [PEM_BODY[3]]),  # one line of a key, as a memory files it
    (SA_JSON_TEXT, ["3f9a1c0b7e2d4a6f8b1c3e5d7f9a0b2c4d6e8f01", *PEM_BODY[:4]]),
    ("apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\nusers:\n- name: admin\n  user:\n"
     "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM4akNDQWRxZ0F3SUJBZ0lJ\n"
     "    client-key-data: " + "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBdVh3a1ZmQjZa",
     ["LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBdVh3a1ZmQjZa"]),
    ("    client-key-data: " + "TUlJRW93SUJBQUtDQVFFQXVYd2tWZkI2WnE4bjJMb3BRdz09Cg==", ["TUlJRW93SUJBQUtDQVFFQXVYd2tWZkI2WnE4"]),
    ("registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken=" + "5f3c2a1e-8b7d-4c6a-9e0f-1a2b3c4d5e6f\n"
     "always-auth=true", ["5f3c2a1e-8b7d-4c6a-9e0f-1a2b3c4d5e6f"]),
    ("//npm.pkg.github.com/:_auth=" + "ZGVwbG95OlF6OHZNMnhMcDlzVDQ=", ["ZGVwbG95OlF6OHZNMnhMcDlzVDQ="]),
    ("[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = deploy\npassword = " + "Qz8vM2xLp9sT4wR7", ["Qz8vM2xLp9sT4wR7"]),
    ("- hosts: web\n  vars:\n    ansible_ssh_private_key: |\n      -----BEGIN OPENSSH PRIVATE KEY-----\n      "
     + "\n      ".join(KEYS[1][1][:3]), KEYS[1][1][:3]),
])
def test_multi_line_secrets_are_redacted_even_when_cut(text, secrets):
    out, counts = Redactor().text(text)
    assert not [s for s in secrets if s in out], out
    assert "[redacted:" in out and sum(counts.values()) >= 1


@pytest.mark.parametrize("text", [
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8\nAuthor: Ana <ana@example.com>",
    'SRCREV_moby = "43fc912ef59a83054ea7f6706df4d53a7dea4d80"',
    '"integrity": "sha512-' + "zGgF6/Ik0OeT0w3KQAYp5cJ9dKCu8vT1oXv8PLmAcFRQ8qs8ZbFrqC1Y2s0nwlB3oIEE6mEcHJ3nN9QxL7yOtQ==" + '"',
    "CONTAINER ID   IMAGE\n3f4e2a1b9c8d   postgres:16",
    "docker inspect 7d9f2c1e0a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e",
    'credentialsId: "29f63271-dc2f-4734-8221-5b31b5169bac"',
    'public_key = "9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit"',
    "md5 checksum: 5c94767cedb5d6987c902ac850ded2c6",
    "-----BEGIN CERTIFICATE-----\n" + "\n".join(PEM_BODY[:3]) + "\n-----END CERTIFICATE-----",
    "apiVersion: external-secrets.io/v1beta1\nkind: ExternalSecret\nspec:\n  data:\n    - secretKey: api-key\n"
    "      remoteRef:\n        key: my-secrets-manager-secret",
    "curl --user neo4j:[PASSWORD] http://[IP]:7474/db/data/",
    "login(username=username, password=password)",
    "golang.org/x/oauth2 v0.15.0 h1:s8pnnxNVzjWyrvYdFUQq5llS1PX2zhPXmccZv99h7uQ=",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGbq8Xr3T0yQn2k9lP4mZ7vW1sR6uY0tE3aB5cD8fH2j ana@laptop",
    "Content-Security-Policy: script-src sha256-B2yPHKaXnvFWtRChIbabYmUBFZdVfKKXHbWtWidDVF8=",
    'assert b64(x) == "SGVsbG8gV29ybGQhIFRoaXMgaXMgYSB0ZXN0IG9mIGJhc2U2NA=="',
])
def test_what_a_coding_agent_needs_to_remember_is_kept(text):
    assert Redactor().text(text)[0] == text


def test_public_scanner_fixtures_meet_the_recall_and_look_alike_targets():
    """The public fixtures (bench/redaction_public/, attributed there): a guard, not a tuning set —
    bench/README.md says which parts were seen while writing the rules."""
    from bench.redaction_quality import public_report
    t = public_report(Redactor())["all"]["total"]
    assert t["secrets"] > 300 and t["lookalikes"] > 150
    assert t["recall"] >= 0.97 and t["fp_rate"] <= 0.05, (t["recall"], t["fp_rate"])


def test_a_key_in_a_long_turn_split_into_episode_pieces_is_redacted_in_every_piece():
    """A memory service that gets the raw turn (a REST retain, not through the proxy) splits it into
    pieces with its whitespace collapsed: the key's lines then sit on one line, space-separated."""
    from memory_adapters.engine.episodes import episodes_from_entry
    raw = base64.b64encode(random.Random(2).randbytes(1600)).decode()
    body = [raw[i:i + 64] for i in range(0, len(raw), 64)]
    key = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----"
    prose = " ".join(["We discussed the deployment plan at length and agreed on the steps."] * 30)
    entry = {"id": "e1", "ts": "2026-11-20T10:00:00Z",
             "request_original": {"model": "m", "messages": [
                 {"role": "user", "content": f"{prose}\n\nhere is the key:\n{key}\n\n{prose}"}]},
             "response": {"choices": [{"message": {"role": "assistant", "content": "Stored it; I will rotate it."}}]}}
    episodes = episodes_from_entry("ops", entry, {}, Redactor())
    text = "\n".join(m.value for m in episodes)
    assert len(episodes) > 3 and not _leaks(text, body)
    assert text.count("agreed on the steps") == 60 and "[redacted:private_key]" in text


@pytest.mark.parametrize("start", ["VATE KEY-----", "E KEY-----", " KEY-----", "KEY-----"])
@pytest.mark.parametrize("escaped", [False, True], ids=["as-written", "json-escaped"])
def test_a_header_cut_before_private_is_still_a_private_key(start, escaped):
    """A paste cut inside the PEM header, so only "…KEY-----" and some body lines remain: the body is a
    private key's (its marker), not a credential named "KEY" — as written and inside a JSON string."""
    key, body = KEYS[2]
    text = key[key.index(start):][:200]  # cut again inside the body: no "PRIVATE KEY" anywhere
    form = json.dumps(text)[1:-1] if escaped else text
    out, counts = Redactor().text(form)
    assert not _leaks(out, body)
    assert "[redacted:private_key]" in out and counts["private_key"] >= 1
