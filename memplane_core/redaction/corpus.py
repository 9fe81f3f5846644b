"""The labelled corpora secret redaction is measured on: fake secrets of every kind in the
contexts people and programs write them (chat, JSON, YAML, env files, shell, logs, code), and
look-alikes that must survive (hashes, UUIDs, ids, placeholders, code that names a secret).

`contract_corpus` is the test suite's: every kind CONTRACT §10 lists, all of which must be found.
`quality_corpus` is the benchmark's (`bench/redaction_quality.py`): 40+ kinds, each sample with a
stable split, about a third `held_out` and never used to tune rules.

Generated from seeded RNGs: the same on every run, and no real credential is ever committed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from dataclasses import dataclass
from typing import Any

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Sample:
    kind: str      # the kind of secret, or "lookalike" for text that must stay unchanged
    secret: str    # the value that must disappear (for look-alikes: the text that must stay)
    text: str      # the sample as it would reach memplane
    context: str   # prose | json | yaml | env | shell | log | code (mixed: the contract corpus)
    held_out: bool


def redacted(redactor: Any, text: str) -> str:
    """What memplane makes of a sample: a JSON object redacted as JSON, anything else as text."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    return json.dumps(redactor.json(doc)[0]) if isinstance(doc, dict) else redactor.text(text)[0]


def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    """Random characters; from ALNUM, with a digit, an upper and a lower case letter (as real keys have)."""
    while True:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        if alphabet is not ALNUM or (any(c.isdigit() for c in s) and any(c.isupper() for c in s)
                                     and any(c.islower() for c in s)):
            return s


def _b64(rng: random.Random, nbytes: int) -> str:
    return base64.b64encode(rng.randbytes(nbytes)).decode()


def _pem(rng: random.Random, label: str, lines: int = 4) -> str:
    body = "\n".join(_b64(rng, 48) for _ in range(lines))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def _pem5(rng: random.Random, label: str) -> str:
    return _pem(rng, label, 5)


# -- the contract corpus (tests) --

def contract_secrets(rng: random.Random) -> list[tuple[str, str]]:
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


def contract_corpus(seed: int = 7) -> list[Sample]:
    """Every kind CONTRACT §10 lists, in chat text, JSON, code, env files and logs, plus fixed
    look-alikes: the test suite's corpus, where every sample must come out right."""
    rng = random.Random(seed)
    out = [Sample(kind, secret, text, "mixed", False) for kind, secret in contract_secrets(rng)
           for text in _contexts(kind, secret)]
    out += [Sample("lookalike", text, text, "mixed", False) for text in LOOKALIKES]
    return out


def evaluate(redactor) -> dict[str, dict[str, float]]:
    """The contract corpus per kind: samples, found (secret gone and a marker present), recall; look-alikes: changed, FP rate."""
    report: dict[str, dict[str, float]] = {}
    for sample in contract_corpus():
        row = report.setdefault(sample.kind, {"samples": 0, "ok": 0})
        row["samples"] += 1
        if sample.kind == "lookalike":
            out, _ = redactor.text(sample.text)
            row["ok"] += out == sample.text
        else:
            out = redacted(redactor, sample.text)
            row["ok"] += sample.secret not in out and "[redacted:" in out
    for kind, row in report.items():
        row["rate"] = row["ok"] / row["samples"]
    return report


# -- the quality corpus (bench) --

def _jwt(rng: random.Random) -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    body = base64.urlsafe_b64encode(json.dumps({"sub": str(rng.randint(1, 10**9)), "n": _r(rng, 6)}).encode())
    return f"{head}.{body.decode().rstrip('=')}.{_r(rng, 43, ALNUM + '-_')}"


# kind → (env/config name used around it, generator)
GENERATORS = {
    "openai": ("OPENAI_API_KEY", lambda r: "sk-" + _r(r, 48)),
    "openai_project": ("OPENAI_API_KEY", lambda r: "sk-proj-" + _r(r, 40) + "T3BlbkFJ" + _r(r, 40)),
    "anthropic": ("ANTHROPIC_API_KEY", lambda r: "sk-ant-api03-" + _r(r, 86, ALNUM + "-_") + "AA"),
    "aws_access_key_id": ("AWS_ACCESS_KEY_ID", lambda r: r.choice(["AKIA", "ASIA"]) + _r(r, 16, UPPER)),
    "aws_secret_access_key": ("AWS_SECRET_ACCESS_KEY", lambda r: _r(r, 40, ALNUM + "/+")),
    "aws_session_token": ("AWS_SESSION_TOKEN", lambda r: "IQoJb3JpZ2luX2Vj" + _r(r, 300, ALNUM + "/+")),
    "github_pat": ("GITHUB_TOKEN", lambda r: "ghp_" + _r(r, 36)),
    "github_oauth": ("GH_TOKEN", lambda r: r.choice(["gho_", "ghu_", "ghs_", "ghr_"]) + _r(r, 36)),
    "github_fine_grained": ("GITHUB_TOKEN", lambda r: "github_pat_" + _r(r, 22) + "_" + _r(r, 59)),
    "gitlab": ("GITLAB_TOKEN", lambda r: "glpat-" + _r(r, 20, ALNUM + "-_")),
    "slack_bot": ("SLACK_BOT_TOKEN", lambda r: f"xoxb-{_r(r, 11, string.digits)}-{_r(r, 12, string.digits)}-{_r(r, 24)}"),
    "slack_user": ("SLACK_TOKEN", lambda r: f"xoxp-{_r(r, 11, string.digits)}-{_r(r, 12, string.digits)}-{_r(r, 32, HEX)}"),
    "slack_webhook": ("SLACK_WEBHOOK_URL", lambda r: f"https://hooks.slack.com/services/T{_r(r, 8, UPPER)}/"
                                                     f"B{_r(r, 8, UPPER)}/{_r(r, 24)}"),
    "stripe": ("STRIPE_SECRET_KEY", lambda r: r.choice(["sk_live_", "rk_live_", "sk_test_"]) + _r(r, 24)),
    "google_api_key": ("GOOGLE_API_KEY", lambda r: "AIza" + _r(r, 35, ALNUM + "-_")),
    "private_key_rsa": ("SSH_KEY", lambda r: _pem5(r, "RSA PRIVATE KEY")),
    "private_key_openssh": ("SSH_KEY", lambda r: _pem5(r, "OPENSSH PRIVATE KEY")),
    "private_key_pkcs8": ("TLS_KEY", lambda r: _pem5(r, r.choice(["PRIVATE KEY", "EC PRIVATE KEY",
                                                                  "ENCRYPTED PRIVATE KEY"]))),
    "jwt": ("ID_TOKEN", _jwt),
    "bearer": ("TOKEN", lambda r: _r(r, 32, ALNUM + "._-")),
    "memplane_token": ("MEMPLANE_TOKEN", lambda r: f"agent-{_r(r, 4, string.ascii_lowercase)}:{_r(r, 43, ALNUM + '-_')}"),
    "basic_auth": ("AUTH", lambda r: base64.b64encode(f"deploy:{_r(r, 16)}".encode()).decode()),
    "url_password": ("DATABASE_URL", lambda r: _r(r, 14)),
    "url_password_no_user": ("REDIS_URL", lambda r: _r(r, 20)),
    "twilio_api_key": ("TWILIO_API_KEY", lambda r: "SK" + _r(r, 32, HEX)),
    "twilio_auth_token": ("TWILIO_AUTH_TOKEN", lambda r: _r(r, 32, HEX)),
    "sendgrid": ("SENDGRID_API_KEY", lambda r: "SG." + _r(r, 22, ALNUM + "-_") + "." + _r(r, 43, ALNUM + "-_")),
    "npm": ("NPM_TOKEN", lambda r: "npm_" + _r(r, 36)),
    "pypi": ("PYPI_TOKEN", lambda r: "pypi-AgEIcHlwaS5vcmc" + _r(r, 60, ALNUM + "-_")),
    "huggingface": ("HF_TOKEN", lambda r: "hf_" + _r(r, 34)),
    "azure_storage": ("AZURE_STORAGE_KEY", lambda r: _r(r, 86, ALNUM + "+/") + "=="),
    "mailgun": ("MAILGUN_API_KEY", lambda r: "key-" + _r(r, 32, HEX)),
    "digitalocean": ("DIGITALOCEAN_TOKEN", lambda r: "dop_v1_" + _r(r, 64, HEX)),
    "shopify": ("SHOPIFY_TOKEN", lambda r: "shpat_" + _r(r, 32, HEX)),
    "databricks": ("DATABRICKS_TOKEN", lambda r: "dapi" + _r(r, 32, HEX)),
    "telegram": ("TELEGRAM_BOT_TOKEN", lambda r: f"{r.randint(10**8, 10**10 - 1)}:AA{_r(r, 33, ALNUM + '_-')}"),
    "newrelic": ("NEW_RELIC_API_KEY", lambda r: "NRAK-" + _r(r, 27, UPPER)),
    "password": ("DB_PASSWORD", lambda r: _r(r, 10) + r.choice("!@#%^&*") + _r(r, 6)),
    "password_with_word": ("DB_PASSWORD", lambda r: r.choice(["Example", "Sample", "Test", "Dummy"]) + _r(r, 6)
                           + r.choice("!@#%") + str(r.randint(10, 99))),
    "env_password": ("PGPASSWORD", lambda r: _r(r, 16)),
}

# How each kind is written when it has no vendor prefix, or how a service names it.
PROSE_NAMES = {
    "aws_secret_access_key": "my AWS secret access key is",
    "aws_session_token": "the aws session token is",
    "twilio_auth_token": "our Twilio auth token is",
    "twilio_api_key": "the Twilio API key is",
    "password": "the database password is",
    "password_with_word": "the admin password is",
    "azure_storage": "the storage AccountKey=",
}


def _in_context(rng: random.Random, kind: str, name: str, secret: str, context: str) -> str:
    """`secret` written the way people and programs write it in `context`."""
    if kind == "url_password":
        dsn = f"postgres://app_user:{secret}@db.internal:5432/prod"
        return {"prose": f"connect with {dsn} please", "json": json.dumps({"dsn": dsn}),
                "yaml": f"database:\n  url: {dsn}\n", "env": f"{name}={dsn}", "shell": f"$ psql '{dsn}' -c 'select 1'",
                "log": f"2026-11-20T10:00:00Z INFO connecting to {dsn}", "code": f'engine = create_engine("{dsn}")'}[context]
    if kind == "url_password_no_user":
        dsn = f"redis://:{secret}@cache.internal:6379/0"
        return {"prose": f"the cache is at {dsn}", "json": json.dumps({"redis": dsn}), "yaml": f"cache: {dsn}\n",
                "env": f"{name}={dsn}", "shell": f"$ redis-cli -u {dsn} ping",
                "log": f"WARN reconnecting to {dsn}", "code": f'r = redis.from_url("{dsn}")'}[context]
    if kind == "basic_auth":
        return {"prose": f"send the header Authorization: Basic {secret} with it",
                "json": json.dumps({"headers": {"Authorization": f"Basic {secret}"}}),
                "yaml": f"headers:\n  Authorization: Basic {secret}\n", "env": f"AUTH_HEADER='Basic {secret}'",
                "shell": f"$ curl -H 'Authorization: Basic {secret}' https://ci.internal/api",
                "log": f"DEBUG > Authorization: Basic {secret}",
                "code": f"headers = {{'Authorization': 'Basic {secret}'}}"}[context]
    if kind in ("bearer", "memplane_token"):
        return {"prose": f"I call it with Bearer {secret} in the header",
                "json": json.dumps({"headers": {"X-Note": f"Bearer {secret}"}}),
                "yaml": f"auth: Bearer {secret}\n", "env": f"AUTH_HEADER='Bearer {secret}'",
                "shell": f"$ curl -H 'Authorization: Bearer {secret}' https://api.internal/v1/models",
                "log": f"DEBUG sending Authorization: Bearer {secret}",
                "code": f'headers = {{"Authorization": f"Bearer {secret}"}}'}[context]
    if kind == "env_password":
        var = rng.choice(["PGPASSWORD", "MYSQL_PWD", "REDISCLI_AUTH", "MONGO_INITDB_ROOT_PASSWORD"])
        return {"prose": f"run it with {var}={secret} set", "json": json.dumps({"env": [f"{var}={secret}"]}),
                "yaml": f"environment:\n  - {var}={secret}\n", "env": f"{var}={secret}",
                "shell": f"$ {var}={secret} psql -h db -U app", "log": f"INFO env {var}={secret}",
                "code": f'os.environ["{var}"] = "{secret}"'}[context]
    if kind == "azure_storage":
        conn = f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={secret};EndpointSuffix=core.windows.net"
        return {"prose": f"use {conn}", "json": json.dumps({"conn": conn}), "yaml": f"storage: \"{conn}\"\n",
                "env": f"AZURE_STORAGE_CONNECTION_STRING=\"{conn}\"", "shell": f"$ az storage ls --connection-string '{conn}'",
                "log": f"INFO storage {conn}", "code": f'client = BlobServiceClient.from_connection_string("{conn}")'}[context]
    said = PROSE_NAMES.get(kind)
    if "private_key" in kind:
        return {"prose": f"here is the key:\n{secret}\nthanks",
                "json": json.dumps({"type": "service_account", "private_key": secret + "\n"}),
                "yaml": "tls:\n  key: |\n" + "\n".join("    " + line for line in secret.splitlines()) + "\n",
                "env": f'{name}="{secret}"', "shell": f"$ cat > id_rsa <<EOF\n{secret}\nEOF",
                "log": f"ERROR could not parse key {secret}", "code": f'KEY = """{secret}"""'}[context]
    return {
        "prose": f"{said} {secret}, please keep it safe." if said else f"My key is {secret}, please keep it safe.",
        "json": json.dumps({"config": {name.lower(): secret, "retries": 3}}),
        "yaml": f"credentials:\n  {name.lower()}: \"{secret}\"\n",
        "env": f"{name}={secret}",
        "shell": f"$ export {name}={secret}",
        "log": f"2026-11-20T10:00:00Z INFO configured {name.lower()}={secret}",
        "code": f'{name.lower()} = "{secret}"',
    }[context]


CONTEXTS = ("prose", "json", "yaml", "env", "shell", "log", "code")


def _lookalikes(rng: random.Random) -> list[tuple[str, str]]:
    """(context, text) pairs that hold no secret."""
    out: list[tuple[str, str]] = []
    for _ in range(30):
        out.append(("prose", f"the request id is {uuid.UUID(int=rng.getrandbits(128))}"))
        out.append(("log", f"commit {hashlib.sha1(rng.randbytes(8)).hexdigest()} fixed the build"))
        out.append(("shell", f"$ sha256sum app.tar.gz\n{hashlib.sha256(rng.randbytes(8)).hexdigest()}  app.tar.gz"))
        out.append(("json", json.dumps({"integrity": "sha512-" + _b64(rng, 48), "version": f"1.{rng.randint(0, 9)}.0"})))
        out.append(("code", f'ETAG = "{hashlib.md5(rng.randbytes(8)).hexdigest()}"'))
        out.append(("json", json.dumps({"image": f"data:image/png;base64,{_b64(rng, 60)}"})))
        out.append(("log", f"INFO order ord_{_r(rng, 24)} paid by cus_{_r(rng, 14)} in {rng.randint(1, 99)} ms"))
        out.append(("yaml", f"image: registry.internal/app@sha256:{hashlib.sha256(rng.randbytes(8)).hexdigest()}\n"))
        out.append(("prose", f"send it to 0x{_r(rng, 40, HEX)} on mainnet"))
        out.append(("code", f'password = os.environ["{rng.choice(["DB_PASSWORD", "PGPASSWORD", "ADMIN_PASS"])}"]'))
        out.append(("code", f"api_key = os.getenv(\"{rng.choice(['OPENAI_API_KEY', 'STRIPE_KEY'])}\")"))
        out.append(("code", f"const token = process.env.{rng.choice(['GITHUB_TOKEN', 'API_TOKEN', 'SLACK_TOKEN'])};"))
        out.append(("code", "secret = config.get_secret(\"payments\")"))
        out.append(("env", f"{rng.choice(['DB_PASSWORD', 'API_KEY', 'SECRET_KEY'])}=  # set in the vault"))
        out.append(("env", f"{rng.choice(['OPENAI_API_KEY', 'ANTHROPIC_API_KEY'])}=sk-..."))
        out.append(("yaml", f"api_key: <YOUR_{rng.choice(['API', 'STRIPE', 'OPENAI'])}_KEY>\n"))
        out.append(("env", f"PASSWORD=${{{rng.choice(['DB_PASSWORD', 'SECRET', 'PGPASS'])}}}"))
        out.append(("prose", f"Use a Bearer token in the Authorization header; {rng.choice(['Bearer authentication', 'bearer tokens', 'the Bearer scheme'])} is described in RFC 6750."))
        out.append(("prose", "the password reset link expired, and the token refresh failed again"))
        out.append(("prose", f"my secret is that I like {rng.choice(['pineapple pizza', 'jazz', 'cold showers'])}"))
        out.append(("log", f"GET /v1/items/{rng.randint(1, 10**6)}?page={rng.randint(1, 9)} 200 {rng.randint(1, 900)}ms"))
        out.append(("prose", f"see https://docs.example.com/guide?page={rng.randint(1, 9)}#auth for details"))
        out.append(("yaml", f"url: postgres://localhost:{rng.randint(5000, 6000)}/app\n"))
        out.append(("code", f"AKIA_PREFIX = 'AKIA'  # {rng.randint(1, 99)} ids start like this"))
        out.append(("prose", f"build {rng.randint(100, 999)} took {rng.randint(1, 60)} minutes on runner {_r(rng, 8, string.ascii_lowercase)}"))
        out.append(("json", json.dumps({"user_id": str(uuid.UUID(int=rng.getrandbits(128))), "plan": "pro"})))
        out.append(("shell", f"$ git log --oneline | head -1\n{_r(rng, 7, HEX)} Merge pull request #{rng.randint(1, 9999)}"))
        out.append(("code", "def check_password(password: str) -> bool:\n    return hmac.compare_digest(hash_(password), stored)"))
        out.append(("env", "API_TOKEN=changeme"))
        out.append(("yaml", "password: '********'\n"))
    return out


def quality_corpus(seed: int = 11, per_kind: int = 16) -> list[Sample]:
    """The large corpus (`bench/redaction_quality.py`): every kind in seven contexts, a third held out."""
    rng = random.Random(seed)
    out: list[Sample] = []
    n = 0
    for kind, (name, make) in GENERATORS.items():
        for i in range(per_kind):
            secret = make(rng)
            context = CONTEXTS[(i + len(kind)) % len(CONTEXTS)]
            out.append(Sample(kind, secret, _in_context(rng, kind, name, secret, context), context, n % 3 == 2))
            n += 1
    for context, text in _lookalikes(rng):
        out.append(Sample("lookalike", text, text, context, n % 3 == 2))
        n += 1
    return out
