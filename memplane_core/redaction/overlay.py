"""memplane's own rules, run before the gitleaks set: the kinds CONTRACT §10 names (so a token is
reported under its familiar kind), memplane agent tokens, and shapes the community set does not
cover (passwords stated in prose, `curl -u`, XML/NuGet config, Kubernetes Secret data, env-style
names). RE2 syntax: no lookarounds or backreferences; a boundary is matched as a character outside
the secret group, so only the group is replaced."""

from __future__ import annotations

import dataclasses

from .checks import assignment_check, bearer_check, jwt_check, looks_placeholder, looks_reference, mixed_token_check, \
    random_enough, shannon_entropy
from .named import key_must_look_generated, random_value
from .pieces import PIECE_RULES
from .rule import Rule, compile_re2, rule

_B = r"(?:^|[^A-Za-z0-9_\-])"          # start of a token
_E = r"(?:[^A-Za-z0-9_\-]|$)"          # end of a token
_SEP = r"[\"']?[ \t]{0,8}(?::=|=>|:|=)[ \t]{0,8}"
_IS = r"(?:[\"']?\s{0,8}(?::|=|=>|\bis\b|\bwas\b|\bof\b)?\s{0,8}[\"'`(]?\s{0,8})"
_ASSIGN_KEYS = (
    r"(?:password|passwd|pwd|pass|secret|secret[_\-]?key|api[_\-]?key|apikey|"
    r"access[_\-]?key|access[_\-]?token|auth[_\-]?token|api[_\-]?token|refresh[_\-]?token|token|"
    r"client[_\-]?secret|private[_\-]?key|credentials?)"
)
_AWS_KEY_ID_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA")
_AWS_KEY_ID = "(?:" + "|".join(_AWS_KEY_ID_PREFIXES) + ")[A-Z0-9]{16}"
# a value: quoted (the quotes stay) or bare
_VALUE = r"(?:\"([^\s\"]{4,})\"|'([^\s']{4,})'|([^\s\"',;{}\[\]]{4,}))"


def _prose_check(v: str) -> bool:
    return assignment_check(v) and any(c.isdigit() for c in v) and any(c.isalpha() for c in v)


def _not_placeholder(v: str) -> bool:
    return not looks_placeholder(v)


def _aws_secret(v: str) -> bool:
    """An AWS secret access key is 40 random base64 characters: mixed case and digits (a 40-hex
    commit id or a path beside a key id is not one)."""
    return (random_enough(v) and any(c.isupper() for c in v) and any(c.islower() for c in v)
            and any(c.isdigit() for c in v))


def _base64_value(v: str) -> bool:
    return not looks_placeholder(v) and shannon_entropy(v) >= 2.5


_SECRET_KIND = compile_re2(r"(?im)^[ \t]*kind:[ \t]*[\"']?secret[\"']?[ \t]*$")


def _in_secret_document(text: str, s: int, e: int) -> tuple[int, int] | None:
    """A `data:` block belongs to a `kind: Secret` document (not ExternalSecret, SopsSecret or a
    SecretStore reference): the kind line within the same YAML document, up to 2,000 characters away."""
    lo, hi = max(0, s - 2000), min(len(text), e + 2000)
    left = text.rfind("\n---", lo, s)
    right = text.find("\n---", e, hi)
    return (s, e) if _SECRET_KIND.search(text[left + 1 if left >= 0 else lo:right if right >= 0 else hi]) else None


# Order matters: specific vendor formats first, generic shapes (bearer, assignments) last,
# so a token is reported under its most precise kind.
_OVERLAY_RULES: tuple[Rule, ...] = (
    rule("private_key",
         r"-----BEGIN[ A-Z0-9_]{0,100}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END[ A-Z0-9_]{0,100}PRIVATE KEY"
         r"(?: BLOCK)?-----", ["PRIVATE KEY"]),
    # a key cut anywhere: no footer, no header, or encoded on one line (pieces.py)
    *PIECE_RULES,
    rule("anthropic", _B + r"(sk-ant-[A-Za-z0-9_\-]{20,})", ["sk-ant-"], group=1, check=random_enough),
    rule("openai", _B + r"(sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,})", ["sk-"], group=1,
         check=lambda v: not v.startswith("sk-ant-") and random_enough(v)),
    # the secret pasted right after its key id ("AKIA… / wJalr…", a credentials.csv row), before
    # the key id rule replaces the id this one is anchored on; 40 characters (up to 64 for a paste)
    rule("aws_secret_access_key", r"\b" + _AWS_KEY_ID + r"\b[^\n]{0,48}?[^A-Za-z0-9/+=]([A-Za-z0-9/+=]{40,64})"
         r"(?:[^A-Za-z0-9/+=]|$)", _AWS_KEY_ID_PREFIXES, group=1, check=_aws_secret),
    rule("aws_access_key_id", r"\b" + _AWS_KEY_ID + r"\b", _AWS_KEY_ID_PREFIXES, check=_not_placeholder),
    # named: `aws_secret_access_key = …`, `--secret-access-key …`, "my secret access key is …"
    rule("aws_secret_access_key",
         r"(?i)(?:aws[_\-\s]?secret[_\-\s]?access[_\-\s]?key|aws[_\-\s]?secret[_\-\s]?key|"
         r"secret[_\-\s]?access[_\-\s]?key|aws[_\-\s]?secret|secretaccesskey)" + _IS +
         r"([A-Za-z0-9/+=]{40,64})(?:[^A-Za-z0-9/+=]|$)", ["secret"], icase=True, group=1, check=random_enough),
    rule("aws_session_token",
         r"(?i)(?:aws[_\-\s]?session[_\-\s]?token|session[_\-\s]?token|security[_\-\s]?token|sessiontoken)"
         r"(?:[\"']?\s{0,8}(?::|=|=>|\bis\b|\bwas\b)?\s{0,8}[\"'`]?\s{0,8})([A-Za-z0-9/+=]{100,})",
         ["token"], icase=True, group=1, check=random_enough),
    rule("aws_session_token", r"\b(?:FwoGZXIvYXdzE|IQoJb3JpZ2luX2Vj|FQoGZXIvYXdzE)[A-Za-z0-9/+=]{40,}",
         ["FwoGZXIvYXdz", "IQoJb3JpZ2lu", "FQoGZXIvYXdz"]),
    rule("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b", ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]),
    rule("github", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b", ["github_pat_"]),
    rule("gitlab", r"\bgl(?:pat|dt|rt|ptt|cbt|soat|ffct)-[A-Za-z0-9_\-]{20,}",
         ["glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glsoat-", "glffct-"]),
    rule("slack_webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
         ["hooks.slack.com"]),
    # every Slack token holds digits (team and user ids, a random tail); `xoxo-gossip-girl.jpg` holds words
    rule("slack", r"\bxox[abposre]-(?:[0-9]+-)?[A-Za-z0-9\-]{10,}", ["xox"],
         check=lambda v: any(c.isdigit() for c in v) and not looks_placeholder(v)),
    rule("slack", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+", ["xapp-"]),
    rule("stripe", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b", ["_live_", "_test_"]),
    rule("google_api_key", r"\b(AIza[0-9A-Za-z_\-]{35})" + _E, ["AIza"], group=1),
    rule("sendgrid", r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}\b", ["SG."]),
    rule("twilio", r"\bSK[0-9a-f]{32}\b", ["SK"]),
    rule("twilio",
         r"(?i)twilio\b[^\n]{0,60}\b(?:auth[_\-\s]?token|api[_\-\s]?(?:key[_\-\s]?)?secret|secret|token)\b"
         r"(?:[\"']?\s{0,8}(?::|=|=>|\bis\b|\bwas\b)?\s{0,8}[\"'`]?\s{0,8})([A-Za-z0-9]{32})\b",
         ["twilio"], icase=True, group=1, check=random_enough),
    rule("mailgun", r"\bkey-[0-9a-f]{32}\b", ["key-"]),
    rule("digitalocean", r"\bdo[opr]_v1_[0-9a-f]{64}\b", ["_v1_"]),
    rule("shopify", r"\bshp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}\b", ["shp"]),
    rule("databricks", r"\bdapi[0-9a-f]{32}(?:-\d)?\b", ["dapi"]),
    rule("doppler", r"\bdp\.(?:st|ct|sa|scim|audit)\.[A-Za-z0-9_\-.]{40,}", ["dp."]),
    rule("telegram", r"\b\d{8,10}:AA[A-Za-z0-9_\-]{33}\b", [":AA"]),
    rule("discord", r"\b[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}\b", ["."],
         check=random_enough),
    rule("square", r"\bEAAA[A-Za-z0-9_\-]{60}\b", ["EAAA"]),
    rule("linear", r"\blin_api_[A-Za-z0-9]{40}\b", ["lin_api_"]),
    rule("atlassian", r"\bATATT3[A-Za-z0-9_\-=]{180,}", ["ATATT3"]),
    rule("newrelic", r"\bNRAK-[A-Z0-9]{27}\b", ["NRAK-"]),
    rule("npm", r"\bnpm_[A-Za-z0-9]{36}\b", ["npm_"]),
    rule("pypi", r"\bpypi-AgE[A-Za-z0-9_\-]{50,}", ["pypi-"]),
    # a token's body is random; an Objective-C category method (`hf_setupConstraintsForView`) is camelCase words
    rule("huggingface", r"\bhf_[A-Za-z0-9]{30,}\b", ["hf_"], check=lambda v: random_enough(v) and random_value(v[3:], 16)),
    rule("azure_storage", r"(?i)\b(?:AccountKey|SharedAccessKey)=([A-Za-z0-9+/]{20,}={0,2})",
         ["key="], icase=True, group=1),
    rule("azure_storage", r"(?i)[?&]sig=([A-Za-z0-9%+/]{20,}(?:%3D|=){0,2})", ["sig="], icase=True, group=1),
    # a JWT, signed or not (`alg: none` leaves the third part empty); headers may be `{"` or `{ "`
    rule("jwt", r"\bey[A-Za-z0-9_\-]{10,}\.ey[A-Za-z0-9_\-]{10,}(?:\.[A-Za-z0-9_\-]*)?", ["ey"], check=jwt_check),
    rule("mailchimp", r"\b[0-9a-f]{32}-us[0-9]{1,2}\b", ["-us"]),
    rule("vault", r"\b(hv[sbr]\.[A-Za-z0-9_\-]{24,})" + _E, ["hvs.", "hvb.", "hvr."], group=1, check=random_enough),
    rule("url_password", r"\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/@\"'<>]{0,256}:([^\s@/\"'<>]+)@", ["://"],
         group=1, check=_not_placeholder),
    # curl -u user:pass / --user user:pass / --user=user:pass
    rule("basic_auth",
         r"(?:^|\s)(?:-u|--user|--proxy-user)(?:[ \t]{1,8}|=)[\"']?[^\s:\"']{1,128}:([^\s\"']{3,256})",
         ["-u", "--user", "--proxy-user"], group=1, check=_not_placeholder),
    rule("bearer", r"(?i)\bbearer\s{1,8}((?:[A-Za-z0-9._\-]{1,128}:)?[A-Za-z0-9._~+/\-]{8,}=*)", ["bearer"],
         icase=True, group=1, check=bearer_check),
    rule("basic_auth", r"(?i)\bbasic\s{1,8}([A-Za-z0-9+/]{12,}={0,2})(?:[^A-Za-z0-9+/=]|$)", ["basic"],
         icase=True, group=1, check=lambda v: not looks_placeholder(v) and shannon_entropy(v) >= 3.0),
    # (any vendor's `<prefix>_<random>` token the rule sets do not name yet: `vendor_token` in named.py)
    # memplane's own agent tokens: `<agent-id>:<token_urlsafe(32)>`
    rule("memplane_agent_token", r"(?:^|[^A-Za-z0-9._\-])[A-Za-z0-9][A-Za-z0-9._\-]{0,127}:([A-Za-z0-9_\-]{40,})"
         + _E, [":"], group=1, check=mixed_token_check),
    # XML and NuGet-style config: <add key="ClearTextPassword" value="…"/>, <password>…</password>
    rule("credential_assignment",
         r"(?i)<add\s+key\s{0,4}=\s{0,4}\"[^\"]{0,100}(?:password|passwd|pwd|secret|token|apikey|api_key|"
         r"connectionstring)[^\"]{0,100}\"\s+value\s{0,4}=\s{0,4}\"([^\"]{4,512})\"",
         ["<add"], icase=True, group=1, check=_not_placeholder),
    rule("credential_assignment",
         r"(?i)<[A-Za-z0-9_:.\-]{0,64}(?:password|passwd|pwd|secret|token|apikey|api_key)[A-Za-z0-9_:.\-]{0,64}>"
         r"([^<\s]{4,512})</", ["pass", "pwd", "secret", "token", "key"], icase=True, group=1,
         check=lambda v: not looks_placeholder(v) and not looks_reference(v) and shannon_entropy(v) >= 2.0),
    # Kubernetes Secret: every value of its `data:` / `stringData:` block
    rule("kubernetes_secret", r"(?m)^[ \t]*(?:data|stringData):[ \t]*\n((?:[ \t]+[^\n]*(?:\n|$))+)",
         ["kind: secret"], icase=True, group=1,
         inner=r"(?m)^[ \t]+[A-Za-z0-9_.\-]+:[ \t]*[\"']?([^\s\"'#]{4,})", refine=_in_secret_document),
    rule("credential_assignment",
         r"(?i)(?:^|[^A-Za-z0-9])" + _ASSIGN_KEYS + _SEP + _VALUE,
         ["pass", "pwd", "secret", "key", "token", "credential"], icase=True, group=None, check=assignment_check),
    # a password or key stated in prose: "the database password is Xy7…" (trailing punctuation stays)
    rule("credential_assignment",
         r"(?i)\b(?:password|passphrase|passwd|secret|api[ _\-]?key|access[ _\-]?key|auth[ _\-]?token|token)"
         r"\s{1,8}(?:is|was|=|:)\s{1,8}[\"'`]?([^\s\"'`,;]{5,}[^\s\"'`,;.:!?)])[\"'`]?[,.;:!?)]*(?:\s|$)",
         ["pass", "secret", "key", "token"], icase=True, group=1, check=_prose_check),
    # a secret-named key in a mapping: env["MYSQL_PWD"] = "…", settings['api_key'] = '…'
    rule("credential_assignment",
         r"(?i)\[\s{0,8}[\"'][A-Za-z0-9_.\-]{0,64}(?:password|passwd|pwd|secret|token|api_?key|auth)"
         r"[A-Za-z0-9_.\-]{0,64}[\"']\s{0,8}\]\s{0,8}=\s{0,8}(?:\"([^\"\s]{4,})\"|'([^'\s]{4,})')",
         ["pass", "pwd", "secret", "token", "key", "auth"], icase=True, group=None, check=assignment_check),
    # detect-secrets' keyword detector: a name that ends in a secret word (any prefix), `:=`/`:`/`=`/`=>` (also
    # `[]=`, `= @"…"`), then the value quoted or bare; or a quoted value straight after the name
    # ending in `;` (`private_key '…';`). The value may hold any characters (`m{{h}o)p${e]…}}`).
    rule("credential_assignment",
         r"(?i)(?:api_?key|auth_?key|service_?key|account_?key|db_?key|"
         r"priv_?key|private_?key|client_?key|db_?pass|key_?pass|password|passwd|pwd|secret)(?:[\"']\])?[\"']?"
         r"[ \t]{0,8}(?:\[\])?[ \t]{0,8}(?::=|=>|:|=)[ \t]{0,8}@?(?:\"([^\"\s]{4,})\"|'([^'\s]{4,})'|([^\s\"'`,;]{4,}))",
         ["key", "pass", "pwd", "secret"], icase=True, group=None, check=assignment_check),
    rule("credential_assignment",
         r"(?i)(?:api_?key|private_?key|password|secret)[A-Za-z0-9_]{0,20}"
         r"[ \t]{0,8}(?:\"([^\"\s]{4,})\"|'([^'\s]{4,})')[ \t]{0,8};",
         ["key", "pass", "secret"], icase=True, group=None, check=assignment_check),
    # environment-style names that end in a secret word: PGPASSWORD=…, MYSQL_PWD=…, REDISCLI_AUTH=…
    rule("credential_assignment",
         r"(?:^|[^A-Za-z0-9_])[A-Z][A-Z0-9_]{0,64}(?:PASSWORD|PASSWD|PWD|SECRET|TOKEN|APIKEY|API_KEY|_AUTH|_PASS|"
         r"CREDENTIALS?)[A-Z0-9_]{0,64}[ \t]{0,8}=[ \t]{0,8}(?:\"([^\s\"]{4,})\"|'([^\s']{4,})'|([^\s\"']{4,}))",
         ["PASS", "PWD", "SECRET", "TOKEN", "KEY", "AUTH", "CREDENTIAL"], group=None, check=assignment_check),
)

# the rules that find a value by its name alone: a key's or token's value must look generated
OVERLAY_RULES: tuple[Rule, ...] = tuple(
    dataclasses.replace(r, allowed=key_must_look_generated) if r.kind == "credential_assignment" and r.allowed is None
    else r for r in _OVERLAY_RULES)
