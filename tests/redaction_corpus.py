"""A labelled corpus of fake secrets (every kind CONTRACT §10 and the redaction issue list)
embedded in chat text, JSON, code, env files and logs, plus look-alikes that must survive.

Secrets are generated from a seeded RNG, so the corpus is the same on every run and no real
credential is ever committed.
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Sample:
    kind: str       # what must be found ("lookalike" for text that must stay unchanged)
    secret: str     # the value that must disappear (for look-alikes: the text that must stay)
    text: str       # the secret in context


def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    while True:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        if alphabet != ALNUM or (any(c.isdigit() for c in s) and any(c.isupper() for c in s)):
            return s


def _pem(rng: random.Random, label: str) -> str:
    body = "\n".join(base64.b64encode(rng.randbytes(48)).decode() for _ in range(4))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def secrets(rng: random.Random) -> list[tuple[str, str]]:
    """(kind, secret) pairs, one or more per kind."""
    jwt = ".".join([base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("="),
                    base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"Ana"}').decode().rstrip("="),
                    _r(rng, 43, ALNUM + "-_")])
    return [
        ("openai", "sk-" + _r(rng, 48)),
        ("openai", "sk-proj-" + _r(rng, 40) + "T3BlbkFJ" + _r(rng, 40)),
        ("anthropic", "sk-ant-api03-" + _r(rng, 86, ALNUM + "-_") + "AA"),
        ("aws_access_key_id", "AKIA" + _r(rng, 16, string.ascii_uppercase + string.digits)),
        ("aws_access_key_id", "ASIA" + _r(rng, 16, string.ascii_uppercase + string.digits)),
        ("aws_secret_access_key", _r(rng, 40, ALNUM + "/+")),
        ("github", "ghp_" + _r(rng, 36)),
        ("github", "gho_" + _r(rng, 36)),
        ("github", "ghu_" + _r(rng, 36)),
        ("github", "ghs_" + _r(rng, 36)),
        ("github", "ghr_" + _r(rng, 36)),
        ("github", "github_pat_" + _r(rng, 22) + "_" + _r(rng, 59)),
        ("gitlab", "glpat-" + _r(rng, 20, ALNUM + "-_")),
        ("slack", "xoxb-" + _r(rng, 11, string.digits) + "-" + _r(rng, 12, string.digits) + "-" + _r(rng, 24)),
        ("slack", "xoxp-" + _r(rng, 11, string.digits) + "-" + _r(rng, 12, string.digits) + "-" + _r(rng, 32, HEX)),
        ("slack_webhook", "https://hooks.slack.com/services/T" + _r(rng, 8, string.ascii_uppercase + string.digits)
         + "/B" + _r(rng, 8, string.ascii_uppercase + string.digits) + "/" + _r(rng, 24)),
        ("stripe", "sk_live_" + _r(rng, 24)),
        ("stripe", "rk_live_" + _r(rng, 24)),
        ("google_api_key", "AIza" + _r(rng, 35, ALNUM + "-_")),
        ("private_key", _pem(rng, "RSA PRIVATE KEY")),
        ("private_key", _pem(rng, "EC PRIVATE KEY")),
        ("private_key", _pem(rng, "OPENSSH PRIVATE KEY")),
        ("private_key", _pem(rng, "PRIVATE KEY")),
        ("private_key", _pem(rng, "ENCRYPTED PRIVATE KEY")),
        ("private_key", _pem(rng, "DSA PRIVATE KEY")),
        ("private_key", _pem(rng, "PGP PRIVATE KEY BLOCK")),
        ("jwt", jwt),
        ("bearer", _r(rng, 32, ALNUM + "._-")),
        ("basic_auth", base64.b64encode(f"deploy:{_r(rng, 16)}".encode()).decode()),
        ("url_password", _r(rng, 14)),
        ("twilio", "SK" + _r(rng, 32, HEX)),
        ("sendgrid", "SG." + _r(rng, 22, ALNUM + "-_") + "." + _r(rng, 43, ALNUM + "-_")),
        ("npm", "npm_" + _r(rng, 36)),
        ("pypi", "pypi-AgEIcHlwaS5vcmc" + _r(rng, 60, ALNUM + "-_")),
        ("huggingface", "hf_" + _r(rng, 34)),
        ("azure_storage", _r(rng, 86, ALNUM + "+/") + "=="),
        ("credential_assignment", _r(rng, 18, ALNUM + "!@#%^&*")),
    ]


def _contexts(kind: str, secret: str) -> list[str]:
    """The same secret in chat text, JSON, code, env/YAML and a log line."""
    if kind == "bearer":
        return [f"curl -H 'Authorization: Bearer {secret}' https://api.example.com",
                json.dumps({"headers": {"X-Trace": "1", "Note": f"Bearer {secret}"}}),
                f'log: sending Bearer {secret} to upstream']
    if kind == "basic_auth":
        return [f"Authorization: Basic {secret}", f"headers = {{'Authorization': 'Basic {secret}'}}"]
    if kind == "url_password":
        return [f"connect to postgres://app_user:{secret}@db.internal:5432/prod please",
                f'DATABASE_URL="mysql://root:{secret}@127.0.0.1/app"',
                json.dumps({"dsn": f"redis://default:{secret}@cache:6379/0"})]
    if kind == "aws_secret_access_key":
        return [f"aws_secret_access_key = {secret}", f"AWS_SECRET_ACCESS_KEY={secret}",
                json.dumps({"SecretAccessKey": "x", "aws_secret_access_key": secret})]
    if kind == "azure_storage":
        return [f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={secret};EndpointSuffix=core.windows.net"]
    if kind == "credential_assignment":
        return [f"password={secret}", f"db:\n  password: '{secret}'\n", f'client_secret = "{secret}"',
                json.dumps({"user": "ana", "password": secret}), f"export API_TOKEN={secret}",
                f"2026-11-20 ERROR login failed secret={secret} retrying"]
    if kind == "private_key":
        return [f"here is the key:\n{secret}\nthanks",
                json.dumps({"type": "service_account", "project_id": "p", "private_key": secret + "\n",
                            "client_email": "svc@p.iam.gserviceaccount.com"})]
    return [f"My key is {secret}, please keep it safe.", json.dumps({"config": {"key": secret, "retries": 3}}),
            f'client = Client(token="{secret}")', f"2026-11-20T10:00:00Z INFO using credential {secret}"]


LOOKALIKES = [
    "123e4567-e89b-12d3-a456-426614174000",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed it",
    "sha256: 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "send it to 0x52908400098527886E0F7030069857D2E4169EE7 on mainnet",
    "see https://docs.example.com/guide?page=2#auth and https://user@example.com/x",
    "set OPENAI_API_KEY=sk-... before running",
    "api_key: <YOUR_KEY>",
    "Use sk-xxxxxxxxxxxxxxxxxxxxxxxx as a placeholder",
    "password: changeme",
    "password: ${DB_PASSWORD}",
    "Authorization: Bearer <token>",
    "Authorization: Bearer YOUR_TOKEN_HERE",
    "AKIAXXXXXXXXXXXXXXXX is the example id format",
    "the token expired yesterday, and the password reset link works",
    "my secret is that I like pineapple pizza",
    "ghp_ prefixes mark GitHub personal tokens",
    "request id req_8f14e45fceea167a5a36dedd4bea2543 took 20ms",
    "postgres://localhost:5432/app has no credentials",
    "the basic idea is simple",
]


def corpus(seed: int = 7) -> list[Sample]:
    rng = random.Random(seed)
    out = [Sample(kind, secret, text) for kind, secret in secrets(rng) for text in _contexts(kind, secret)]
    out += [Sample("lookalike", text, text) for text in LOOKALIKES]
    return out


def evaluate(redactor) -> dict[str, dict[str, float]]:
    """Per kind: samples, found (secret gone and a marker present), recall; look-alikes: changed, FP rate."""
    report: dict[str, dict[str, float]] = {}
    for sample in corpus():
        row = report.setdefault(sample.kind, {"samples": 0, "ok": 0})
        row["samples"] += 1
        if sample.kind == "lookalike":
            out, _ = redactor.text(sample.text)
            row["ok"] += out == sample.text
        else:
            try:
                doc = json.loads(sample.text)
            except ValueError:
                doc = None
            out = json.dumps(redactor.json(doc)[0]) if isinstance(doc, dict) else redactor.text(sample.text)[0]
            row["ok"] += sample.secret not in out and "[redacted:" in out
    for kind, row in report.items():
        row["rate"] = row["ok"] / row["samples"]
    return report
