"""Independent redaction evaluation data: fake secrets and look-alikes taken from public secret-scanner
test fixtures (not from memplane's own rules), each with its source, placed in the contexts an agent's
text holds them in. Never tune rules on the held-out third (`held_out`, a stable hash split).

Sources (test fixtures; every value is a published dummy, none is a live credential):
  detect-secrets  Yelp/detect-secrets test_data/each_secret.py, test_data/config.env (Apache-2.0)
  gitleaks        gitleaks/gitleaks cmd/generate/config/rules/generic.go true/false positives (MIT)
  trufflehog      trufflesecurity/trufflehog pkg/detectors/sentrytoken/v1/sentrytoken_test.go,
                  pkg/detectors/azureappconfigconnectionstring test (validPattern)
  memplane-issue  the false-positive classes issue 23 lists (URL path segment, Objective-C selector,
                  secret name in a manifest, shell substitution) and CONTRACT §10's look-alikes
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Secret:
    source: str
    value: str          # what must disappear
    name: str           # the key it sits under in keyed contexts (from the fixture)
    mention: str        # how prose names it
    context_free: bool  # recognisable with no key or vendor word next to it (a vendor-prefixed token)


SECRETS = (
    Secret("detect-secrets", "c2VjcmV0IG1lc3NhZ2Ugc28geW91J2xsIG5ldmVyIGd1ZXNzIG15IHBhc3N3b3Jk", "base64_secret",
           "the secret", False),
    Secret("detect-secrets", "8b1118b376c313ed420e5133ba91307817ed52c2", "hex_secret", "the secret", False),
    Secret("detect-secrets", "whywouldyouusehttpforpasswords", "basic_auth", "the password", False),
    Secret("detect-secrets", "AKIAIOSFODNN7EXAMPLE", "aws_access_key", "the AWS access key", True),
    Secret("detect-secrets", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key",
           "the AWS secret access key", False),
    Secret("detect-secrets", "gX69YO4CvBsVjzAwYxdGyDd30t5+9ez31gKATtj4", "mimi", "the mimi secret", False),
    Secret("gitleaks", "Zf3D0LXCM3EIMbgJpUNnkRtOfOueHznB", "generic_secret", "the api key", False),
    Secret("gitleaks", "CLOJARS_34bf0e88955ff5a1c328d6a7491acc4f48e865a7b8dd4d70a70749037443", "clojars_token",
           "the Clojars token", True),
    Secret("gitleaks", "6da89121079f83b2eb6acccf8219ea982c3d79bccc3e9c6a85856480661f8fde", "client_secret",
           "the client secret", False),
    Secret("trufflehog", "ad00eba0e2b5b057146e1b2b9373f86dbb0e712d106529111d97cb13f081de20", "sentry_token",
           "the sentry token", False),
    Secret("trufflehog", "80DtxZkndXpM2mV2J1JjX2vL1x4gm1hHn8Y3JeFJ4N0PPLSO5D70JQQJ99BBAC1i4FpQkb5wAAACAAZC26dr",
           "azure_appconfig_secret", "the Azure App Configuration secret", False),
)

# the basic-auth fixture's own shape, and the App Configuration connection string as trufflehog tests it
WHOLE = (
    ("detect-secrets", "whywouldyouusehttpforpasswords", "http://username:whywouldyouusehttpforpasswords@example.com"),
    ("trufflehog", "80DtxZkndXpM2mV2J1JjX2vL1x4gm1hHn8Y3JeFJ4N0PPLSO5D70JQQJ99BBAC1i4FpQkb5wAAACAAZC26dr",
     "Endpoint=https://trufflesecurity.azconfig.io;Id=u+De;"
     "Secret=80DtxZkndXpM2mV2J1JjX2vL1x4gm1hHn8Y3JeFJ4N0PPLSO5D70JQQJ99BBAC1i4FpQkb5wAAACAAZC26dr"),
)

LOOKALIKES = (  # (source, text that must come back unchanged)
    ("detect-secrets", "red_herring = 'DEADBEEF'"),
    ("gitleaks", "client_vpn_endpoint_id = aws_ec2_client_vpn_endpoint.client-vpn-endpoint.id"),
    ("gitleaks", "password combination.\n\nR5: Regulatory--21"),
    ("memplane-issue", "see https://api.example.com/v1/tokens/a8f3k2l9m4n7p1q5r8s2t6u0v3w7x1y4/revoke for details"),
    ("memplane-issue", "GET /api/keys/9f8e7d6c5b4a39281706f5e4d3c2b1a0 HTTP/1.1"),
    ("memplane-issue", "- (void)setApiKey:(NSString *)apiKey forService:(NSString *)serviceName;"),
    ("memplane-issue", "[client authenticateWithToken:accessToken secret:clientSecret completion:nil];"),
    ("memplane-issue", "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: postgres-credentials\n"
                       "        key: password"),
    ("memplane-issue", "api_key: OPENAI_API_KEY\nsecret_name: prod-db-password"),
    ("memplane-issue", "export DB_PASSWORD=$(cat /run/secrets/db_password)"),
    ("memplane-issue", 'TOKEN="$(vault kv get -field=token secret/ci)"'),
    ("memplane-issue", "commit 3f2a9c8d7e6b5a4f3e2d1c0b9a8f7e6d5c4b3a29 fixed the auth token refresh"),
    ("memplane-issue", "request id 550e8400-e29b-41d4-a716-446655440000 for api key rotation"),
    ("memplane-issue", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("memplane-issue", "use OPENAI_API_KEY=sk-... in your env"),
    ("memplane-issue", "the password is expired, please reset it"),
    ("memplane-issue", "def get_token(self, refresh_token_id: str) -> str:"),
    ("memplane-issue", "token = request.headers.get('Authorization')"),
    ("memplane-issue", "The secret to good tokenization is a stable vocabulary of 32000 entries."),
)


def _contexts(s: Secret) -> list[tuple[str, str]]:
    v, n = s.value, s.name
    keyed = [
        ("env", f"{n.upper()}={v}"),
        ("yaml", f"settings:\n  {n}: {v}\n  region: eu-west-1"),
        ("json_keyed", json.dumps({n: v, "region": "eu-west-1"})),
        ("prose", f"Here is {s.mention}: {v} (rotate it after the demo)."),
    ]
    free = [
        ("json_unkeyed", json.dumps({"lines": ["deploy step 3", v]})),
        ("log", f"2026-11-20T10:00:00Z INFO uploader started with {v} for bucket media"),
        ("code", f'client = Client("{v}", timeout=30)'),
        ("alone", v),
    ]
    return keyed + (free if s.context_free else [])


@dataclass(frozen=True)
class Sample:
    source: str
    context: str
    secret: str      # must disappear; "" for a look-alike
    text: str
    held_out: bool


def _held(key: str) -> bool:
    return hashlib.sha256(key.encode()).digest()[0] % 3 == 0


def samples() -> list[Sample]:
    out = []
    for s in SECRETS:
        for ctx, text in _contexts(s):
            out.append(Sample(s.source, ctx, s.value, text, _held(s.value)))
    for source, value, text in WHOLE:
        out.append(Sample(source, "fixture", value, text, _held(value)))
    for source, text in LOOKALIKES:
        out.append(Sample(source, "lookalike", "", text, _held(text)))
    return out
