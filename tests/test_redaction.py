"""Secret-shaped values never reach a prompt or a memory backend; look-alikes stay untouched."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from memplane_core.redact import RedactionConfigError, Redactor
from tests.conftest import url_of
from memplane_core.redaction.corpus import contract_corpus as corpus
from memplane_core.redaction.corpus import evaluate


def test_every_listed_kind_is_found_and_no_lookalike_is_changed():
    report = evaluate(Redactor())
    lines = [f"{kind:24s} {row['ok']:>3.0f}/{row['samples']:<3.0f} "
             f"{'recall' if kind != 'lookalike' else 'kept'} {row['rate']:.0%}" for kind, row in sorted(report.items())]
    print("\n" + "\n".join(lines))
    missed = {k: r for k, r in report.items() if r["rate"] < 1.0}
    assert not missed, f"missed or changed: {missed}"
    assert set(report) == {  # every kind the contract and the issue list is in the corpus
        "openai", "anthropic", "aws_access_key_id", "aws_secret_access_key", "github", "gitlab", "slack",
        "slack_webhook", "stripe", "google_api_key", "private_key", "jwt", "bearer", "basic_auth", "url_password",
        "twilio", "sendgrid", "npm", "pypi", "huggingface", "azure_storage", "credential_assignment", "lookalike"}


def test_redaction_keeps_surrounding_text_and_json_structure():
    r = Redactor()
    key = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
    text, counts = r.text(f"before {key} after")
    assert text == "before [redacted:openai] after" and counts == {"openai": 1}
    doc, counts = r.json({"messages": [{"role": "user", "content": f"use {key}"}],
                          "headers": {"authorization": "Token abc123def456ghi789", "x-count": 3},
                          "password": "correct-horse-battery", "max_tokens": 100, "api_key": "<YOUR_KEY>"})
    assert doc["messages"][0]["content"] == "use [redacted:openai]"
    assert doc["headers"] == {"authorization": "[redacted:secret_field]", "x-count": 3}
    assert doc["password"] == "[redacted:secret_field]" and doc["max_tokens"] == 100
    assert doc["api_key"] == "<YOUR_KEY>"  # a placeholder is not a secret
    assert counts == {"openai": 1, "secret_field": 2}


def test_a_resent_conversation_is_redacted_and_counted_the_same_every_turn():
    r = Redactor()
    history = [{"role": "user", "content": "deploy with sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z please"},
               {"role": "assistant", "content": "Done, and I rotated ghp_" + "a1B2" * 9 + " too."}]
    turns = [r.json({"messages": history[: n + 1]}) for n in range(2)] + [r.json({"messages": history})]
    assert [dict(c) for _, c in turns] == [{"openai": 1}, {"openai": 1, "github": 1}, {"openai": 1, "github": 1}]
    assert turns[2][0] == turns[1][0] and "[redacted:github]" in turns[2][0]["messages"][1]["content"]


def test_counts_never_carry_the_secret():
    r = Redactor()
    for sample in corpus():
        if sample.kind == "lookalike":
            continue
        _, counts = r.text(sample.text)
        assert all(sample.secret[:8] not in k for k in counts)


def test_operator_rules_and_allow_list(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text("rules:\n  - kind: internal_ticket_key\n    pattern: 'TKT-[0-9]{8}'\n    keywords: ['TKT-']\n"
                     "allow:\n  - 'sk-test-allowed[0-9]+'\n")
    r = Redactor.from_file(rules)
    assert r.text("ticket TKT-12345678 opened")[0] == "ticket [redacted:internal_ticket_key] opened"
    kept = "sk-test-allowed1234567890123456789"
    assert r.text(f"fixture key {kept}")[0] == f"fixture key {kept}"
    bad = tmp_path / "bad.yml"
    bad.write_text("rules:\n  - kind: Bad Kind\n    pattern: 'x'\n")
    with pytest.raises(RedactionConfigError, match="rules.0.kind"):
        Redactor.from_file(bad)
    bad.write_text("rules:\n  - kind: ok\n    pattern: '(unclosed'\n")
    with pytest.raises(RedactionConfigError, match="rules.0.pattern"):
        Redactor.from_file(bad)


async def test_retain_is_scrubbed_and_nothing_secret_reaches_logs(stack, aiohttp_server):
    received = []
    aws = "AKIA" + "Q7ZP4M2K9XW3VN5T"
    gh = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"

    async def retain(request):
        received.append(await request.json())
        return web.json_response({"status": "stored"}, status=202)

    async def recall(request):
        return web.json_response({"memories": [{"text": f"deploy with {gh}", "kind": "fact"}]})

    app = web.Application()
    app.router.add_post("/retain", retain)
    app.router.add_post("/recall", recall)
    server = await aiohttp_server(app)
    stack.add_agent("leaky", url_of(server))
    await stack.openai("leaky").chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"my aws key is {aws} and password=Sup3rS3cretPw!"}])
    await stack.settle()
    [body] = received
    sent = json.dumps(body)
    assert aws not in sent and "Sup3rS3cretPw!" not in sent and gh not in sent
    assert body["entry"]["request_original"]["messages"][0]["content"] == \
        "my aws key is [redacted:aws_access_key_id] and password=[redacted:credential_assignment]"
    assert body["metadata"]["policy_removed"] >= 3
    assert body["metadata"]["redactions"]["aws_access_key_id"] == 2  # original and effective request
    assert body["entry"]["id"] == stack.ledger("leaky")[0]["id"]  # same id live retain and backfill use
    logs = stack.log.getvalue()
    for secret in (aws, gh, "Sup3rS3cretPw!"):
        assert secret[:10] not in logs
    # the operator's provider key never shows up in the ledger or the logs either
    assert "sk-operator-openai-key" not in logs
    assert "sk-operator-openai-key" not in (stack.history_root / "leaky" / "history.jsonl").read_text()


@pytest.mark.parametrize("text, secret", [
    ("my AWS secret access key is wJalrXUtnFEMI/K7MDENG/bPxRfiCYz8Q2vKp3Lm", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz8Q2vKp3Lm"),
    ('{"SecretAccessKey" "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz8Q2vKp3Lm"}', "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz8Q2vKp3Lm"),
    ("aws_session_token=IQoJb3JpZ2luX2VjEJr" + "aB3dE9fG2hJ7kL1mN5pQ8rS" * 6, "aB3dE9fG2hJ7kL1mN5pQ8rS"),
    ("our Twilio auth token is 9f3c2b7a1e8d4f6a0b5c3d2e1f7a8b9c", "9f3c2b7a1e8d4f6a0b5c3d2e1f7a8b9c"),
    ("the cache is redis://:Zx81kQpw7Lm2@cache:6379/0", "Zx81kQpw7Lm2"),
    ("$ PGPASSWORD=Qm7vR2xLp9sT4 psql -h db", "Qm7vR2xLp9sT4"),
    ("password: Example7cwALr@51", "Example7cwALr@51"),
    ("curl -H 'Authorization: Bearer analyst:Yf3kQ9mZp2Lr8vX1cT6wN4bH7jD0sG5aE2uR9oI3lK8'",
     "Yf3kQ9mZp2Lr8vX1cT6wN4bH7jD0sG5aE2uR9oI3lK8"),
])
def test_secret_classes_the_review_found_missing_are_redacted(text, secret):
    out, counts = Redactor().text(text)
    assert secret not in out and sum(counts.values()) >= 1


@pytest.mark.parametrize("text", [
    'password = os.environ["DB_PASSWORD"]',
    "api_key = os.getenv('OPENAI_API_KEY')",
    "DB_PASSWORD=  # set in the vault\nDEBUG=true",
    "Use a Bearer token in the Authorization header; Bearer authentication is in RFC 6750.",
])
def test_code_and_prose_that_only_name_secrets_stay_intact(text):
    assert Redactor().text(text)[0] == text


@pytest.mark.parametrize("text, secret", [
    ("curl -u deploy:Sx8vQ2pLm9zR https://artifacts.internal/upload", "Sx8vQ2pLm9zR"),
    ("curl --user=ci-bot:Hq4nV7cX2mPz -X POST https://ci.internal/hook", "Hq4nV7cX2mPz"),
    ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbmEiLCJpYXQiOjE3MDAwMDAwMDB9.Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5",
     "eyJzdWIiOiJhbmEiLCJpYXQiOjE3MDAwMDAwMDB9"),
    ('<packageSourceCredentials><feed><add key="Username" value="bob" />'
     '<add key="ClearTextPassword" value="n8Kq2WzP4xLr" /></feed></packageSourceCredentials>', "n8Kq2WzP4xLr"),
    ("<settings><server><password>Tr0ub4dor-x9Q</password></server></settings>", "Tr0ub4dor-x9Q"),
    ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n  password: UzNjcjN0UGFzc3cwcmQ=\n",
     "UzNjcjN0UGFzc3cwcmQ="),
    ("my token is analyst:" + "Yf3kQ9mZp2Lr8vX1cT6wN4bH7jD0sG5aE2uR9oI3lK8", "Yf3kQ9mZp2Lr8vX1cT6wN4bH7jD0sG5aE2uR9oI3lK8"),
    ("2026-11-20 INFO client ready with dop_v1_" + "a1b2c3d4" * 8, "a1b2c3d4" * 8),
])
def test_secret_shapes_the_second_review_found_missing_are_redacted(text, secret):
    out, counts = Redactor().text(text)
    assert secret not in out and sum(counts.values()) >= 1, out


@pytest.mark.parametrize("text", [
    "see https://api.example.com/v1/tokens/a8f3k2l9m4n7p1q5r8s2t6u0v3w7x1y4/revoke for details",
    "- (void)setApiKey:(NSString *)apiKey forService:(NSString *)serviceName;",
    "[client authenticateWithToken:accessToken secret:clientSecret completion:nil];",
    "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: postgres-credentials\n        key: password",
    "export DB_PASSWORD=$(cat /run/secrets/db_password)",
    "commit 3f2a9c8d7e6b5a4f3e2d1c0b9a8f7e6d5c4b3a29 fixed the auth token refresh",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "request id 550e8400-e29b-41d4-a716-446655440000 for api key rotation",
    "use OPENAI_API_KEY=sk-... in your env",
])
def test_urls_selectors_secret_names_and_substitutions_are_not_damaged(text):
    assert Redactor().text(text)[0] == text


def test_an_operator_rule_that_could_backtrack_is_refused_with_the_field_named(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text("rules:\n  - kind: ticket\n    pattern: '(?<=TKT-)[0-9]+'\n")
    with pytest.raises(RedactionConfigError, match=r"rules\.0\.pattern.*RE2"):
        Redactor.from_file(rules)


def test_the_community_rule_set_is_pinned_and_attributed():
    from importlib import resources

    from memplane_core.redact import GITLEAKS_VERSION, builtin_rules
    data = resources.files("memplane_core.redaction").joinpath("data")
    assert f"gitleaks v{GITLEAKS_VERSION}" in data.joinpath("gitleaks.toml").read_text()[:400]
    assert "Copyright (c) 2019 Zachary Rice" in data.joinpath("LICENSE-gitleaks.txt").read_text()
    kinds = {r.kind for r in builtin_rules()}
    assert len(kinds) > 150 and {"openai", "github", "gitlab_pat", "vault_service_token"} <= kinds


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9"  # 40 characters, the AWS shape


@pytest.mark.parametrize("text, secret", [
    # the pair pasted together: the key id alone used to be caught and the secret beside it kept
    ("my AWS creds are AKIAQWERTYUIOPASDFGH / " + AWS_SECRET, AWS_SECRET),
    ("AKIAQWERTYUIOPASDFGH:" + AWS_SECRET, AWS_SECRET),
    ("key id AKIAQWERTYUIOPASDFGH and the secret " + AWS_SECRET + ".", AWS_SECRET),
    ("AKIAQWERTYUIOPASDFGH,\"" + AWS_SECRET + "\"", AWS_SECRET),  # a credentials.csv row
    # the reviewer's paste, 43 characters long
    ("my AWS creds are AKIAQWERTYUIOPASDFGH / wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2"),
    # the CLI flag and the prose label, with a real-length secret and the reviewer's longer one
    ("aws configure set --secret-access-key " + AWS_SECRET, AWS_SECRET),
    ("--secret-access-key wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2"),
    ("secret access key wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLm9Pn2"),
])
def test_an_aws_secret_access_key_next_to_its_key_id_or_its_label_never_reaches_memory(text, secret):
    out, counts = Redactor().text(text)
    assert secret not in out and counts["aws_secret_access_key"] == 1, out
    assert "AKIAQWERTYUIOPASDFGH" not in out


@pytest.mark.parametrize("text", [
    "AKIAQWERTYUIOPASDFGH is rotated; see https://docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials.html",
    "AKIAQWERTYUIOPASDFGH was used by commit 3f2a9c8d7e6b5a4f3e2d1c0b9a8f7e6d5c4b3a29",
    "AKIAQWERTYUIOPASDFGH in arn:aws:iam::123456789012:user/deploy-bot-production-eu",
])
def test_what_follows_a_key_id_is_kept_when_it_is_not_a_secret(text):
    out, _ = Redactor().text(text)
    assert out == text.replace("AKIAQWERTYUIOPASDFGH", "[redacted:aws_access_key_id]")
