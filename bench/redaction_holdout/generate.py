"""Generate the vendor-format redaction corpus (`corpus.jsonl` beside this file).

Written before any rule of issue 50, from vendors' own documented key formats (not from any
scanner's test data): for each vendor a seeded RNG draws values in its format and places them in
the contexts an agent's text holds credentials in — chat prose, lists, log lines, Go/JS/Python
code, YAML/INI/XML config, URLs and connection strings. Every secret sample has a look-alike twin:
the same context holding a value that is not a secret (an environment reference, a path, a word, a
version), which must come out unchanged. A separate collateral set holds text that must never
change: URLs, identifiers, commit SHAs, UUIDs, hashes, base64 data, shell commands, prose.

The split is by vendor (a stable hash of its name), so held-out vendors are unseen as a whole;
collateral is split by template. Regenerate with `python -m bench.redaction_holdout.generate`
(byte-identical output; `tests/test_redaction_named.py` checks it)."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

OUT = Path(__file__).with_name("corpus.jsonl")
SEED = 50

LOWER = string.ascii_lowercase
ALNUM = string.ascii_letters + string.digits
LALNUM = string.ascii_lowercase + string.digits
UALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
PWCHARS = ALNUM + "!#%^*_-+"


@dataclass(frozen=True)
class Item:
    split: str      # dev | held-out
    group: str      # secret | twin | collateral
    vendor: str     # vendor name (secrets, twins) or collateral template id
    context: str    # the context template's id
    secret: str     # what must disappear ("" for twins and collateral)
    text: str       # the sample as it reaches memplane


def r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def u(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


Gen = Callable[[random.Random], str]


@dataclass(frozen=True)
class Vendor:
    name: str       # as prose names it
    slug: str       # as code and config name it
    word: str       # what the vendor calls the credential
    make: Gen       # a value in the vendor's documented format


# name, what the credential is called, documented format. About half have no fixed prefix.
VENDORS: tuple[Vendor, ...] = (
    Vendor("GitHub", "github", "personal access token", lambda g: "ghp_" + r(g, 36)),
    Vendor("GitLab", "gitlab", "access token", lambda g: "glpat-" + r(g, 20, URLSAFE)),
    Vendor("Groq", "groq", "API key", lambda g: "gsk_" + r(g, 52)),
    Vendor("Replicate", "replicate", "API token", lambda g: "r8_" + r(g, 37)),
    Vendor("Notion", "notion", "integration secret", lambda g: "ntn_" + r(g, 11, string.digits) + r(g, 35)),
    Vendor("Airtable", "airtable", "personal access token", lambda g: "pat" + r(g, 14) + "." + r(g, 64, HEX)),
    Vendor("Postman", "postman", "API key", lambda g: "PMAK-" + r(g, 24, HEX) + "-" + r(g, 34, HEX)),
    Vendor("Sentry", "sentry", "auth token", lambda g: "sntryu_" + r(g, 64, HEX)),
    Vendor("Pulumi", "pulumi", "access token", lambda g: "pul-" + r(g, 40, HEX)),
    Vendor("Tailscale", "tailscale", "auth key", lambda g: "tskey-auth-k" + r(g, 10) + "CNTRL-" + r(g, 33)),
    Vendor("Supabase", "supabase", "access token", lambda g: "sbp_" + r(g, 40, HEX)),
    Vendor("Grafana", "grafana", "service account token", lambda g: "glsa_" + r(g, 32) + "_" + r(g, 8, HEX)),
    Vendor("Figma", "figma", "personal access token", lambda g: "figd_" + r(g, 40, URLSAFE)),
    Vendor("Netlify", "netlify", "personal access token", lambda g: "nfp_" + r(g, 36)),
    Vendor("Render", "render", "API key", lambda g: "rnd_" + r(g, 32)),
    Vendor("Pinecone", "pinecone", "API key", lambda g: "pcsk_" + r(g, 5) + "_" + r(g, 60)),
    Vendor("Perplexity", "perplexity", "API key", lambda g: "pplx-" + r(g, 48)),
    Vendor("xAI", "xai", "API key", lambda g: "xai-" + r(g, 80)),
    Vendor("ElevenLabs", "elevenlabs", "API key", lambda g: "sk_" + r(g, 48, HEX)),
    Vendor("LangSmith", "langsmith", "personal access token", lambda g: "lsv2_pt_" + r(g, 32, HEX) + "_" + r(g, 10, HEX)),
    Vendor("Langfuse", "langfuse", "secret key", lambda g: "sk-lf-" + u(g)),
    Vendor("Okta", "okta", "API token", lambda g: "00" + r(g, 40, URLSAFE)),
    Vendor("Contentful", "contentful", "management token", lambda g: "CFPAT-" + r(g, 43, URLSAFE)),
    Vendor("PostHog", "posthog", "personal API key", lambda g: "phx_" + r(g, 47)),
    Vendor("Bitbucket", "bitbucket", "app password", lambda g: "ATBB" + r(g, 32)),
    Vendor("CircleCI", "circleci", "personal API token", lambda g: "CCIPAT_" + r(g, 22) + "_" + r(g, 40, HEX)),
    Vendor("SonarQube", "sonarqube", "user token", lambda g: "squ_" + r(g, 40, HEX)),
    Vendor("Dynatrace", "dynatrace", "API token", lambda g: "dt0c01." + r(g, 24, UALNUM) + "." + r(g, 64, UALNUM)),
    Vendor("LaunchDarkly", "launchdarkly", "SDK key", lambda g: "sdk-" + u(g)),
    Vendor("Typeform", "typeform", "personal access token", lambda g: "tfp_" + r(g, 44) + "_" + r(g, 14)),
    Vendor("Resend", "resend", "API key", lambda g: "re_" + r(g, 8) + "_" + r(g, 24)),
    Vendor("Brevo", "brevo", "API key", lambda g: "xkeysib-" + r(g, 64, HEX) + "-" + r(g, 16)),
    Vendor("HubSpot", "hubspot", "private app token", lambda g: "pat-na1-" + u(g)),
    Vendor("Razorpay", "razorpay", "key secret", lambda g: r(g, 24)),
    Vendor("Riot Games", "riot", "API key", lambda g: "RGAPI-" + u(g)),
    Vendor("Alibaba Cloud", "alibaba", "AccessKey ID", lambda g: "LTAI" + r(g, 20)),
    Vendor("Tencent Cloud", "tencent", "SecretId", lambda g: "AKID" + r(g, 32)),
    Vendor("Terraform Cloud", "terraform", "API token", lambda g: r(g, 14) + ".atlasv1." + r(g, 67)),
    Vendor("ngrok", "ngrok", "authtoken", lambda g: "2" + r(g, 26) + "_" + r(g, 21)),
    Vendor("Shippo", "shippo", "API token", lambda g: "shippo_live_" + r(g, 40, HEX)),
    Vendor("EasyPost", "easypost", "API key", lambda g: "EZAK" + r(g, 54)),
    Vendor("ReadMe", "readme", "API key", lambda g: "rdme_" + r(g, 70, HEX)),
    Vendor("Prefect", "prefect", "API key", lambda g: "pnu_" + r(g, 36)),
    Vendor("Neon", "neon", "API key", lambda g: "napi_" + r(g, 64, LALNUM)),
    Vendor("Clerk", "clerk", "secret key", lambda g: "sk_live_" + r(g, 40)),
    Vendor("Mapbox", "mapbox", "secret token", lambda g: "sk.eyJ1Ijoi" + r(g, 50) + "." + r(g, 22, URLSAFE)),
    Vendor("Frame.io", "frameio", "developer token", lambda g: "fio-u-" + r(g, 64, URLSAFE)),
    Vendor("Scalingo", "scalingo", "API token", lambda g: "tk-us-" + r(g, 48, URLSAFE)),
    Vendor("Fly.io", "flyio", "deploy token", lambda g: "FlyV1 fm2_" + r(g, 120, B64)),
    Vendor("Doppler", "doppler", "personal token", lambda g: "dp.pt." + r(g, 43)),
    # no fixed prefix: only the name around the value says it is a credential
    Vendor("Datadog", "datadog", "API key", lambda g: r(g, 32, HEX)),
    Vendor("Datadog", "datadog_app", "application key", lambda g: r(g, 40, HEX)),
    Vendor("Cloudflare", "cloudflare", "API token", lambda g: r(g, 40, URLSAFE)),
    Vendor("Algolia", "algolia", "admin API key", lambda g: r(g, 32, HEX)),
    Vendor("Vercel", "vercel", "access token", lambda g: r(g, 24)),
    Vendor("Cohere", "cohere", "API key", lambda g: r(g, 40)),
    Vendor("Mistral", "mistral", "API key", lambda g: r(g, 32)),
    Vendor("Together AI", "together", "API key", lambda g: r(g, 64, HEX)),
    Vendor("AssemblyAI", "assemblyai", "API key", lambda g: r(g, 32, HEX)),
    Vendor("Deepgram", "deepgram", "API key", lambda g: r(g, 40, HEX)),
    Vendor("Weights & Biases", "wandb", "API key", lambda g: r(g, 40, HEX)),
    Vendor("Cloudinary", "cloudinary", "API secret", lambda g: r(g, 27, URLSAFE)),
    Vendor("Auth0", "auth0", "client secret", lambda g: r(g, 64, URLSAFE)),
    Vendor("Azure OpenAI", "azure_openai", "API key", lambda g: r(g, 32, HEX)),
    Vendor("Segment", "segment", "write key", lambda g: r(g, 32)),
    Vendor("Mixpanel", "mixpanel", "service account secret", lambda g: r(g, 32)),
    Vendor("Twilio", "twilio", "auth token", lambda g: r(g, 32, HEX)),
    Vendor("Plaid", "plaid", "secret", lambda g: r(g, 30, HEX)),
    Vendor("PayPal", "paypal", "client secret", lambda g: "E" + r(g, 79, URLSAFE)),
    Vendor("Spotify", "spotify", "client secret", lambda g: r(g, 32, HEX)),
    Vendor("Twitch", "twitch", "client secret", lambda g: r(g, 30, LALNUM)),
    Vendor("Steam", "steam", "Web API key", lambda g: r(g, 32, "0123456789ABCDEF")),
    Vendor("Zendesk", "zendesk", "API token", lambda g: r(g, 40)),
    Vendor("Rollbar", "rollbar", "access token", lambda g: r(g, 32, HEX)),
    Vendor("Bugsnag", "bugsnag", "API key", lambda g: r(g, 32, HEX)),
    Vendor("Opsgenie", "opsgenie", "API key", lambda g: u(g)),
    Vendor("PagerDuty", "pagerduty", "API key", lambda g: "u+" + r(g, 18, URLSAFE)),
    Vendor("Postmark", "postmark", "server token", lambda g: u(g)),
    Vendor("Mailjet", "mailjet", "secret key", lambda g: r(g, 32, HEX)),
    Vendor("Snyk", "snyk", "API token", lambda g: u(g)),
    Vendor("Heroku", "heroku", "API key", lambda g: u(g)),
    Vendor("Confluent", "confluent", "API secret", lambda g: r(g, 64, B64)),
    Vendor("Sumo Logic", "sumologic", "access key", lambda g: r(g, 64)),
    Vendor("Logz.io", "logzio", "shipping token", lambda g: r(g, 32, string.ascii_letters)),
    Vendor("IBM Cloud", "ibmcloud", "API key", lambda g: r(g, 44, URLSAFE)),
    Vendor("Travis CI", "travis", "API token", lambda g: r(g, 22, URLSAFE)),
    Vendor("Coinbase", "coinbase", "API secret", lambda g: r(g, 32)),
    Vendor("Intercom", "intercom", "access token", lambda g: "dG9rOj" + r(g, 54, B64) + "="),
    Vendor("Upstash", "upstash", "REST token", lambda g: "A" + r(g, 5) + "ASQgY" + r(g, 80, URLSAFE) + "="),
    Vendor("Elastic Cloud", "elastic", "API key", lambda g: base64.b64encode((r(g, 20, URLSAFE) + ":" + r(g, 22, URLSAFE)).encode()).decode()),
    Vendor("Salesforce", "salesforce", "access token", lambda g: "00D" + r(g, 12) + "!" + r(g, 96, ALNUM + "._")),
    Vendor("Zoom", "zoom", "client secret", lambda g: r(g, 32)),
    Vendor("Box", "box", "developer token", lambda g: r(g, 32)),
    Vendor("Asana", "asana", "personal access token", lambda g: "2/" + r(g, 16, string.digits) + "/" + r(g, 16, string.digits) + ":" + r(g, 32, HEX)),
    Vendor("Snowflake", "snowflake", "password", lambda g: r(g, 14, PWCHARS) + r(g, 2, string.digits)),
    Vendor("MongoDB Atlas", "mongodb", "password", lambda g: r(g, 18)),
    Vendor("PostgreSQL", "postgres", "password", lambda g: r(g, 16, PWCHARS) + r(g, 2, string.digits)),
    Vendor("MySQL", "mysql", "password", lambda g: r(g, 12) + r(g, 1, "!#%^*") + r(g, 3, string.digits)),
    Vendor("RabbitMQ", "rabbitmq", "password", lambda g: r(g, 20)),
    Vendor("Redis Cloud", "redis", "password", lambda g: r(g, 32)),
    Vendor("SQL Server", "mssql", "password", lambda g: r(g, 15, PWCHARS) + r(g, 1, string.digits)),
)

EMAILS = ("ops@acme.io", "dana.k@example.org", "billing@northwind.dev", "sre-team@contoso.net", "me@jules.fr")


def held_out(key: str) -> bool:
    """A stable 40 % of vendors (or collateral templates), unseen while rules are written."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 5 < 2


def _camel(slug: str) -> str:
    parts = slug.replace(".", "_").split("_")
    return parts[0] + "".join(p.title() for p in parts[1:])


def _title(slug: str) -> str:
    return "".join(p.title() for p in slug.split("_"))


# -- non-secret values for the look-alike twins: what people put where a secret could be --

def _twin_value(g: random.Random, v: Vendor, where: str) -> str:
    up = v.slug.upper()
    choices = {
        "prose": [f"in 1Password under {v.name}", "not set yet", "the one in the team vault", "rotated every 90 days",
                  "stored in AWS Secrets Manager", f"{v.slug}-prod", "expired", "`$" + up + "_API_KEY`"],
        "word": ["REDACTED", "unknown", "pending", "none", "revoked", f"${up}_TOKEN", f"see {g.choice(EMAILS)}"],
        "code": [f"os.environ[\"{up}_API_KEY\"]", f"process.env.{up}_TOKEN", f"os.Getenv(\"{up}_KEY\")",
                 f"config.{_camel(v.slug)}ApiKey", f"settings.{v.slug.upper()}_SECRET", f"getSecret(\"{v.slug}\")"],
        "literal": [f"{v.slug}.api_key", f"{_camel(v.slug)}ApiKeyHeader", "X-Api-Key", f"/etc/{v.slug}/token",
                    f"{up}_API_KEY", f"{v.slug}-credentials", "Authorization", f"v{g.randint(1, 4)}.{g.randint(0, 20)}.{g.randint(0, 9)}"],
        "config": [f"${{{up}_PASSWORD}}", f"{{{{ .Values.{_camel(v.slug)}.password }}}}", f"!vault secret/{v.slug}#token",
                   f"${{{up}_API_KEY}}", "\"\"", f"/run/secrets/{v.slug}_token", "ENC[AES256_GCM,data:...]"],
        "log": [f"{v.slug}-default", "<none>", "(empty)", "from-env", f"profile:{v.slug}", "***"],
        "url_q": [f"page={g.randint(2, 40)}", "format=json", f"utm_source={v.slug}", f"lang=en&sort=desc",
                  f"ref={g.choice(['docs', 'blog', 'pricing'])}"],
        "dsn_pw": [f"${{{up}_PASSWORD}}", "%s", "{password}", "<password>"],
    }[where]
    return g.choice(choices)


def _contexts(g: random.Random, v: Vendor, s: str, twin: bool) -> list[tuple[str, str]]:
    """(context id, text): `s` placed as a credential, or for a twin a non-secret value in its place."""
    up, camel, title = v.slug.upper(), _camel(v.slug), _title(v.slug)
    word = v.word
    word_low = word.lower()
    email = g.choice(EMAILS)
    host = f"{v.slug.replace('_', '-')}.internal"

    def tv(where: str) -> str:
        return _twin_value(g, v, where) if twin else s

    out = [
        ("prose-is", f"The {v.name} {word_low} is {tv('prose')}"),
        ("prose-chat", f"hey, the {v.name} {g.choice(['secret key', 'key', 'token', 'api key'])} is {tv('word')} — "
                       f"can you add it to the staging env?"),
        ("list-dash", f"- {v.name} {g.choice(['token', 'key', 'secret'])} - '{tv('word')}'"),
        ("list-slash", f"{v.name}: {tv('word')} / {email}"),
        ("chat-colon", f"{v.name} {word}: {tv('word')}"),
        ("log-debug", f"[DEBUG] Using Key={tv('log')}"),
        ("log-line", f"2026-11-{g.randint(10, 28)}T0{g.randint(0, 9)}:{g.randint(10, 59)}:{g.randint(10, 59)}Z DEBUG "
                     f"{v.slug}.client: init with token={tv('log')} region=us-east-1"),
        ("go-assign", f"\t{camel}Key := \"{tv('literal')}\"\n\tclient := {v.slug}.New({camel}Key)"),
        ("go-header", f"\treq.Header.Set(\"Authorization\", \"Bearer {s}\")" if not twin
                      else f"\treq.Header.Set(\"Authorization\", \"Bearer \"+{camel}Token)"),
        ("js-const", f"const {camel}Token = '{tv('literal')}';\nexport default {{ token: {camel}Token }};"),
        ("js-header", f"fetch(url, {{ headers: {{ 'X-{title}-Key': '{tv('literal')}' }} }})"),
        ("py-kwarg", f"client = {title}Client(api_key=\"{tv('literal')}\", timeout=30)"),
        ("py-assign", f"{v.slug}_secret = \"{tv('literal')}\"" if not twin else f"{v.slug}_secret = {tv('code')}"),
        ("py-header", f"headers = {{\"Authorization\": \"Token {s}\"}}" if not twin
                      else f"headers = {{\"Authorization\": f\"Token {{{v.slug}_token}}\"}}"),
        ("yaml-section", f"{v.slug}:\n  endpoint: https://api.{v.slug}.com\n  apiKey: {tv('config')}\n  timeout: 30\n"),
        ("yaml-password", f"services:\n  {v.slug}:\n    username: svc_{v.slug}\n    password: \"{tv('config')}\"\n"),
        ("ini-section", f"[{v.slug}]\nhost = {host}\nsecret = {tv('config')}\n"),
        ("xml-datasource", f"<dataSource name=\"{v.slug}\">\n  <user>svc</user>\n  <password>{tv('config')}</password>\n"
                           f"</dataSource>"),
        ("url-webhook", f"POST https://hooks.{v.slug}.com/webhooks/{tv('literal') if not twin else 'events'}"
                        + ("" if not twin else f"?{_twin_value(g, v, 'url_q')}")),
        ("url-license", (f"https://api.{v.slug}.com/v2/report?license_key={s}&format=json" if not twin
                         else f"https://api.{v.slug}.com/v2/report?{_twin_value(g, v, 'url_q')}&format=json")),
        ("url-token", (f"curl 'https://api.{v.slug}.com/v1/stats?access_token={s}'" if not twin
                       else f"curl 'https://api.{v.slug}.com/v1/stats?{_twin_value(g, v, 'url_q')}'")),
        ("jdbc", f"jdbc:postgresql://{host}:5432/app?user=svc&password={tv('dsn_pw')}" if not twin
                 else f"jdbc:postgresql://{host}:5432/app?user=svc&ssl=true"),
        ("conn-string", f"Server=tcp:{host},1433;Database=app;User ID=svc;Password={tv('dsn_pw')};Encrypt=True;"),
        ("dsn-userinfo", f"{g.choice(['postgres', 'mysql', 'amqp', 'redis', 'mongodb+srv'])}://svc_{v.slug}:"
                         f"{tv('dsn_pw')}@{host}/app" if not twin else
                         f"{g.choice(['postgres', 'mysql', 'amqp', 'redis'])}://svc_{v.slug}@{host}/app"),
        ("cli-flag", f"$ {v.slug}-cli login --{g.choice(['token', 'api-key', 'secret'])} {tv('literal')}"),
        ("env-line", f"{up}_{g.choice(['API_KEY', 'TOKEN', 'SECRET', 'KEY'])}={tv('config')}"),
    ]
    return out


# -- collateral: text that holds no secret and must come out unchanged --

def _collateral(g: random.Random) -> list[tuple[str, str]]:
    sha = lambda: hashlib.sha1(g.randbytes(16)).hexdigest()  # noqa: E731
    sha256 = lambda: hashlib.sha256(g.randbytes(16)).hexdigest()  # noqa: E731
    word = lambda: g.choice(["summer", "river", "orbit", "maple", "delta", "cobalt", "lumen", "harbor", "pixel", "tundra"])  # noqa: E731
    camel = lambda: g.choice(["setup", "apply", "load", "reset", "update"]) + g.choice(["Theme", "Constraints", "Layout", "Cache", "Gestures"]) + g.choice(["ForView", "IfNeeded", "WithStyle", ""])  # noqa: E731
    sentence = lambda: base64.b64encode(g.choice([b"The quick brown fox jumps over the lazy dog. ",
                                                  b"Quarterly revenue grew by twelve percent in the north region. ",
                                                  b"{\"user\": \"dana\", \"role\": \"viewer\", \"theme\": \"dark\"}"]) * g.randint(1, 3)).decode()  # noqa: E731
    return [
        ("url-xoxo", f"![party](https://cdn.{word()}.com/images/{g.randint(2019, 2026)}/xoxo-{word()}-{g.randint(1, 99)}.jpg)"),
        ("url-xoxo-path", f"https://i.pinimg.com/736x/{r(g, 2, HEX)}/{r(g, 2, HEX)}/xoxo_{word()}_{r(g, 32, HEX)}.png"),
        ("url-path-hex", f"see https://github.com/acme/{word()}/blob/{sha()}/src/main.py#L{g.randint(1, 400)}"),
        ("url-query", f"https://www.google.com/search?q={word()}+{word()}&oq={word()}&sourceid=chrome&ie=UTF-8"),
        ("url-s3", f"s3://data-lake/events/2026/11/{g.randint(10, 28)}/part-00000-{u(g)}.c000.snappy.parquet"),
        ("url-key-param", f"https://api.{word()}.com/v1/items?sort_key=created_at&page_token=page{g.randint(2, 9)}"),
        ("objc-hf", f"- (void)hf_{camel()}:(UIView *)view animated:(BOOL)animated;"),
        ("objc-hf-call", f"[self.collectionView hf_{camel()}];"),
        ("code-camel", f"const {g.choice(['authTokenStorageKey', 'apiKeyHeaderName', 'sessionTokenKey'])} = "
                       f"'{g.choice(['auth.token', 'X-Api-Key', 'ui.session.token', 'app:token'])}';"),
        ("code-ident", f"api_key = request.headers.get(\"X-Api-Key\")"),
        ("code-getenv", f"token := os.Getenv(\"{g.choice(['GITHUB_TOKEN', 'SLACK_BOT_TOKEN', 'CI_JOB_TOKEN'])}\")"),
        ("code-func", f"def rotate_api_key(user_id: int, *, force: bool = False) -> ApiKey:"),
        ("code-sql", f"CREATE TABLE api_keys (id BIGSERIAL PRIMARY KEY, key_hash CHAR(64) NOT NULL, owner_id INT);"),
        ("code-redis-key", f"cache_key = f\"user:{{user_id}}:profile:v{g.randint(1, 5)}\""),
        ("code-i18n", f"t('settings.security.{g.choice(['password', 'token', 'apiKey'])}.{g.choice(['label', 'help', 'placeholder'])}')"),
        ("commit-sha", f"commit {sha()}\nAuthor: Dana K <dana@example.org>\n\n    fix token refresh race"),
        ("git-checkout", f"$ git checkout {sha()} -- src/auth/token.py"),
        ("git-rev", f"pinned to rev = \"{sha()}\" in the lockfile"),
        ("uuid-request", f"request {u(g)} failed: token expired, retrying"),
        ("uuid-json", json.dumps({"id": u(g), "tenant_id": u(g), "status": "active"})),
        ("hash-sha256", f"{sha256()}  {word()}-{g.randint(1, 9)}.{g.randint(0, 9)}.tar.gz"),
        ("hash-docker", f"docker pull ghcr.io/acme/{word()}@sha256:{sha256()}"),
        ("hash-npm", json.dumps({"resolved": f"https://registry.npmjs.org/{word()}/-/{word()}-1.2.3.tgz",
                                 "integrity": "sha512-" + base64.b64encode(g.randbytes(64)).decode()})),
        ("hash-etag", f"ETag: \"{hashlib.md5(g.randbytes(8)).hexdigest()}\""),
        ("b64-datauri", f"<img src=\"data:image/png;base64,{base64.b64encode(g.randbytes(90)).decode()}\">"),
        ("b64-prose", f"the payload decoded from {sentence()} looked fine"),
        ("b64-json", json.dumps({"event": "upload", "body": sentence()})),
        ("shell-subst", f"KEY=$(openssl rand -hex 32)\necho \"generated\""),
        ("shell-export", f"export {g.choice(['GITHUB_TOKEN', 'NPM_TOKEN', 'API_KEY'])}=$({g.choice(['gh auth token', 'cat ~/.npm-token', 'pass show api/key'])})"),
        ("shell-vault", f"TOKEN=$(vault kv get -field=token secret/ci/{word()}) ./deploy.sh"),
        ("shell-ssh", f"ssh-keygen -t ed25519 -C \"{g.choice(EMAILS)}\" -f ~/.ssh/id_{word()}"),
        ("prose-password", f"Passwords must be at least {g.randint(10, 16)} characters and include a number."),
        ("prose-hint", f"password hint: {g.choice(['first pet + year', 'the usual one', 'mum maiden name', 'street we grew up on'])}"),
        ("prose-key", f"The key insight is that {word()} caching halves the latency; the token budget is {g.randint(2, 9)}k."),
        ("prose-api", f"Set your API key in Settings → API keys, then restart the {word()} worker."),
        ("prose-secret", f"The secret is to {g.choice(['let the dough rest overnight', 'start early', 'keep the tests small'])}."),
        ("prose-auth", f"Auth is handled by the {word()} gateway; the bearer scheme is described in RFC 6750."),
        ("log-ids", f"2026-11-{g.randint(10, 28)} INFO trace_id={r(g, 32, HEX)} span_id={r(g, 16, HEX)} GET /v1/items 200"),
        ("log-addr", f"panic: runtime error at 0x{r(g, 12, HEX)} in goroutine {g.randint(1, 99)}"),
        ("container-id", f"CONTAINER ID   IMAGE\n{r(g, 12, HEX)}   postgres:16"),
        ("version", f"{word()}=={g.randint(1, 9)}.{g.randint(0, 30)}.{g.randint(0, 9)} --hash=sha256:{sha256()}"),
        ("kv-memory", json.dumps({"key": f"{word()}.{word()}_v{g.randint(1, 5)}", "value": f"prefers {word()} theme"})),
        ("yaml-ref", f"env:\n  - name: API_TOKEN\n    valueFrom:\n      secretKeyRef:\n        name: {word()}-credentials\n        key: token\n"),
        ("mac-ip", f"eth0: {':'.join(r(g, 2, HEX) for _ in range(6))} inet6 fe80::{r(g, 4, HEX)}:{r(g, 4, HEX)}"),
        ("tokenizer", f"tokenizer: {g.choice(['cl100k_base', 'o200k_base'])}, max_tokens: {g.randint(256, 4096)}, key_id: {g.randint(1, 9)}"),
    ]


def build() -> list[Item]:
    g = random.Random(SEED)
    items: list[Item] = []
    for v in VENDORS:
        split = "held-out" if held_out(v.name) else "dev"
        for _ in range(2):  # two draws of every context per vendor
            value = v.make(g)
            for ctx, text in _contexts(g, v, value, twin=False):
                items.append(Item(split, "secret", v.name, ctx, value, text))
            for ctx, text in _contexts(g, v, value, twin=True):
                items.append(Item(split, "twin", v.name, ctx, "", text))
    for _ in range(8):
        for ctx, text in _collateral(g):
            items.append(Item("held-out" if held_out("collateral:" + ctx) else "dev", "collateral", ctx, ctx, "", text))
    return items


def write(path: Path = OUT) -> None:
    path.write_text("".join(json.dumps(asdict(i), ensure_ascii=False) + "\n" for i in build()))


def load(path: Path = OUT) -> list[Item]:
    return [Item(**json.loads(line)) for line in path.read_text().splitlines() if line]


if __name__ == "__main__":
    write()
    items = load()
    for split in ("held-out", "dev"):
        part = [i for i in items if i.split == split]
        print(f"{split}: {len({i.vendor for i in part if i.group == 'secret'})} vendors, "
              f"{sum(i.group == 'secret' for i in part)} secrets, {sum(i.group == 'twin' for i in part)} twins, "
              f"{sum(i.group == 'collateral' for i in part)} collateral")
