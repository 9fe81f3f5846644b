"""Independent redaction evaluation data: fake secrets and look-alikes taken from public secret-scanner
test fixtures (not from memplane's own rules), each with its source, placed in the contexts an agent's
text holds them in. Never tune rules on the held-out third (`held_out`, a stable hash split).

Sources (test fixtures; every value is a published dummy, none is a live credential):
  detect-secrets  Yelp/detect-secrets test_data/each_secret.py, test_data/config.env, tests/plugins/
                  {discord,jwt,mailchimp_key,slack,stripe_key,telegram_token,grafana,hashicorp_vault_token,
                  okta,azure_storage_key,keyword,artifactory}_test.py (Apache-2.0)
  gitleaks        gitleaks/gitleaks cmd/generate/config/rules/generic.go true/false positives (MIT)
  trufflehog      trufflesecurity/trufflehog pkg/detectors/<name>/<name>_test.go pattern tests: sentrytoken,
                  groq, planetscale, deepseek, pubnub, zohocrm, bitmex, sonarcloud, ngrok, meraki, jfrog,
                  azure app configuration, azure repository key, azure SAS token, cloudconvert (AGPL-3.0;
                  only the dummy test strings are used, as data)
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


_DS = "detect-secrets"
_TH = "trufflehog"
_GL = "gitleaks"

SECRETS = (
    # detect-secrets test_data/each_secret.py, test_data/config.env
    Secret(_DS, "c2VjcmV0IG1lc3NhZ2Ugc28geW91J2xsIG5ldmVyIGd1ZXNzIG15IHBhc3N3b3Jk", "base64_secret", "the secret", False),
    Secret(_DS, "8b1118b376c313ed420e5133ba91307817ed52c2", "hex_secret", "the secret", False),
    Secret(_DS, "whywouldyouusehttpforpasswords", "basic_auth", "the password", False),
    Secret(_DS, "AKIAIOSFODNN7EXAMPLE", "aws_access_key", "the AWS access key", True),
    Secret(_DS, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key", "the AWS secret access key", False),
    Secret(_DS, "gX69YO4CvBsVjzAwYxdGyDd30t5+9ez31gKATtj4", "mimi", "the mimi secret", False),
    # detect-secrets tests/plugins/*_test.py (values the plugin must flag; `xxxx` placeholders left out)
    Secret(_DS, "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs", "discord_bot_token", "the Discord bot token", True),
    Secret(_DS, "Nzk5MjgxNDk0NDc2NDU1OTg3.YABS5g.2lmzECVlZv3vv6miVnUaKPQi2wI", "discord_token", "the Discord token", True),
    Secret(_DS, "MZ1yGvKTjE0rY0cV8i47CjAa.uRHQPq.Xb1Mk2nEhe-4iUcrGOuegj57zMC", "bot_token", "the bot token", True),
    Secret(_DS, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIy"
                "fQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", "id_token", "the JWT", True),
    Secret(_DS, "eyJ0eXAiOiJKV1QiLA0KImFsZyI6IkhTMjU2In0.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIy"
                "fQ", "session_jwt", "the session JWT", True),
    Secret(_DS, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IsWww6HFkcOtIMOWxZHDqcOoIiwiaWF0IjoxNTE2"
                "MjM5MDIyfQ.k5HibI_uLn_RTuPcaCNkaVaQH2y5q6GvJg8GPpGMRwQ", "jwt", "the token", True),
    Secret(_DS, "343ea45721923ed956e2b38c31db76aa-us30", "mailchimp_api_key", "the Mailchimp API key", True),
    Secret(_DS, "a2937653ed38c31a43ea46e2b19257db-us2", "mailchimp_key", "the Mailchimp key", True),
    Secret(_DS, "xoxp-523423-234243-234233-e039d02840a0b9379c", "slack_token", "the Slack token", True),
    Secret(_DS, "xoxa-2-511111111-31111111111-3111111111111-e039d02840a0b9379c", "slack_app_token", "the Slack token", True),
    Secret(_DS, "xoxb-34532454-e039d02840a0b9379c", "slack_bot_token", "the Slack bot token", True),
    Secret(_DS, "sk_live_ReTllpYQYfIZu2Jnf2lAPFjD", "stripe_secret_key", "the Stripe key", True),
    Secret(_DS, "rk_live_5TcWfjKmJgpql9hjpRnwRXbT", "stripe_restricted_key", "the Stripe restricted key", True),
    Secret(_DS, "110201543:AAHdqTcvCH1vGWJxfSe1ofSAs0K5PALDsaw", "telegram_bot_token", "the Telegram bot token", True),
    Secret(_DS, "7213808860:AAH1bjqpKKW3maRSPAxzIU-0v6xNuq2-NjM", "bot_token", "the bot token", True),
    Secret(_DS, "glsa_Q0tTx59W5f7LXgxiM4MjJs75176oun5F_e5c6b96d", "grafana_token", "the Grafana token", True),
    Secret(_DS, "glc_eyJrIjoiZjI0YzZkNGEwZDBmZmZjMmUzNTU2ODcxMmY0ZWZlNTQ1NTljMDFjOCIsIm4iOiJteXRva2VuIiwiaWQiOjF9",
           "grafana_cloud_token", "the Grafana Cloud token", True),
    Secret(_DS, "eyJrIjoiR0ZXZmt1UFc0OEpIOGN5RWdUalBJTllUTk83VlhtVGwiLCJuIjoiYXBpa2V5Y3VybCIsImlkIjo2fQ==",
           "grafana_api_key", "the Grafana API key", False),
    Secret(_DS, "hvs.wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx", "vault_token", "the Vault token", True),
    Secret(_DS, "00ZDreYRgPTWY4MpAf5ED9TVXjfS9XKxT6Fy3fC7uA", "okta_api_token", "the Okta API token", False),
    # gitleaks cmd/generate/config/rules/generic.go true positives
    Secret(_GL, "Zf3D0LXCM3EIMbgJpUNnkRtOfOueHznB", "generic_secret", "the api key", False),
    Secret(_GL, "CLOJARS_34bf0e88955ff5a1c328d6a7491acc4f48e865a7b8dd4d70a70749037443", "clojars_token", "the Clojars token", True),
    Secret(_GL, "6da89121079f83b2eb6acccf8219ea982c3d79bccc3e9c6a85856480661f8fde", "client_secret", "the client secret", False),
    # trufflehog pkg/detectors/<name>/<name>_test.go pattern tests (validPattern / want)
    Secret(_TH, "ad00eba0e2b5b057146e1b2b9373f86dbb0e712d106529111d97cb13f081de20", "sentry_token", "the sentry token", False),
    Secret(_TH, "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", "groq_token", "the Groq key", True),
    Secret(_TH, "pscale_tkn_toLyJg1LfgY8vDQr9vhfF2HcT410U3q1alxt7012kcV", "planetscale_token", "the PlanetScale token", True),
    Secret(_TH, "sk-abc123def456ghi789jkl012mno345pq", "deepseek_api_key", "the DeepSeek key", True),
    Secret(_TH, "sub-c-sy4te40h-w1oc-zpyq-zlrw-w6ehv0y0y78c", "pubnub_subscription_key", "the PubNub subscription key",
           False),
    Secret(_TH, "1000.1fa6966eafbb115624baa4103269e50e.e57d155232227b4e41fa7dd2b88dd4d4", "zohocrm_token",
           "the Zoho CRM token", False),
    Secret(_TH, "W_HlMtrmELzXm4bSlWv49JLcgvg5hvu467WbbnpmoEA-RjrY", "bitmex_secret", "the BitMEX secret", False),
    Secret(_TH, "hxrxxgxtcjxj7ta3dn33c5r5i2h0i6cqjv9kwkye", "sonarcloud_token", "the SonarCloud token", False),
    Secret(_TH, "2WIRSIHOQyHSVklZnoz2k6bTYdH_0E7z0Ta9QEyR1fZvQ0KU9", "ngrok_authtoken", "the ngrok authtoken", False),
    Secret(_TH, "e9e0f062f587b423bb6cc6328eb786d75b45783e", "meraki_api_key", "the Meraki API key", False),
    Secret(_TH, "5YcZhIKwxTdxwpZHf9c1Usu8xNtAklRsqWYXWf2qmjW0RSQQ0U4sVnrNgOwIJlTOqJf06T3dl", "jfrog_token",
           "the JFrog token", False),
    Secret(_TH, "80DtxZkndXpM2mV2J1JjX2vL1x4gm1hHn8Y3JeFJ4N0PPLSO5D70JQQJ99BBAC1i4FpQkb5wAAACAAZC26dr",
           "azure_appconfig_secret", "the Azure App Configuration secret", False),
)

# fixtures kept whole, as the scanners' tests write them: (source, secret, text)
WHOLE = (
    (_DS, "whywouldyouusehttpforpasswords", "http://username:whywouldyouusehttpforpasswords@example.com"),
    (_DS, "lJzRc1YdHaAA2KCNJJ1tkYwF/+mKK6Ygw0NGe170Xu592euJv2wYUtBlV8z+qnlcNQSnIYVTkLWntUO1F8j8rQ==",
     'AccountKey="lJzRc1YdHaAA2KCNJJ1tkYwF/+mKK6Ygw0NGe170Xu592euJv2wYUtBlV8z+qnlcNQSnIYVTkLWntUO1F8j8rQ=="'),
    (_DS, "{{h}o)p${e]nob(ody[finds>-_$#thisone}}", 'apikey: "{{h}o)p${e]nob(ody[finds>-_$#thisone}}"'),
    (_DS, "{{h}o)p${e]nob(ody[finds>-_$#thisone}}", "my_password={{h}o)p${e]nob(ody[finds>-_$#thisone}}"),
    (_DS, "{{h}o)p${e]nob(ody[finds>-_$#thisone}}", 'some_dict["secret"] = "{{h}o)p${e]nob(ody[finds>-_$#thisone}}"'),
    (_TH, "80DtxZkndXpM2mV2J1JjX2vL1x4gm1hHn8Y3JeFJ4N0PPLSO5D70JQQJ99BBAC1i4FpQkb5wAAACAAZC26dr",
     "Endpoint=https://trufflesecurity.azconfig.io;Id=u+De;"
     "Secret=80DtxZkndXpM2mV2J1JjX2vL1x4gm1hHn8Y3JeFJ4N0PPLSO5D70JQQJ99BBAC1i4FpQkb5wAAACAAZC26dr"),
    (_TH, "R2xlVEmqi+OW130dxWIDhfw1K6XKw/gxc5P9te3cwWBtnK2XkZq5k+VUAdnuX1Y0T/I5CRK9fJyBJr31SmFEYw==",
     "AZURE_URL=https://test.scm.azure-api.net\nPASSWORD=git&202503251200&R2xlVEmqi+OW130dxWIDhfw1K6XKw/gxc5P9te3cwWBt"
     "nK2XkZq5k+VUAdnuX1Y0T/I5CRK9fJyBJr31SmFEYw=="),
    (_TH, "WSdF9YeZhvrbs%2B%2B1f8ZdDBzEe7fBJ%2BenuaXQ%2BJ9WOw0%3D",
     "AZURE_BLOB_SAS_TOKEN=sp=r&st=2025-03-04T07:24:52Z&se=2025-04-04T15:24:52Z&spr=https&sv=2022-11-02&sr=c&"
     "sig=WSdF9YeZhvrbs%2B%2B1f8ZdDBzEe7fBJ%2BenuaXQ%2BJ9WOw0%3D"),
    (_TH, "W_HlMtrmELzXm4bSlWv49JLcgvg5hvu467WbbnpmoEA-RjrY",
     "bitmexkey: I4_XpH-fJJiLFn--Wo7rnlXE + bitmexsecret: W_HlMtrmELzXm4bSlWv49JLcgvg5hvu467WbbnpmoEA-RjrY "),
)

LOOKALIKES = (  # (source, text that must come back unchanged)
    (_DS, "red_herring = 'DEADBEEF'"),
    (_DS, "pk_live_j5krY8XTgIcDaHDb3YrsAfCl"),  # a Stripe publishable key is public by design
    (_DS, "MyClass.atLeast24CharactersField"),
    (_DS, "resolution: {integrity: sha512-/AazAV/F+HK4LIywF9C+NYHcJo038zEnWkteilcxC1FM/uK/4NVGDKGrxx7nNq1ybspAroRKT4I1FHf"
          "xQzxkUw==}"),
    (_DS, 'theapikey := ""'),
    (_DS, 'theapikey := "somefakekey"'),
    (_DS, "password: ${link}"),
    (_DS, 'my_password = "fakesecret"'),
    (_DS, "my_password = foo(hey)you"),
    (_DS, "my_password = request.json_body['hey']"),
    (_DS, "my_password = True"),
    (_DS, "login(username=username, password=password)"),
    (_DS, 'open(self, password = ""):'),
    (_DS, "apiKey: this.apiKey,"),
    (_DS, "apiKey: fs.readFileSync('foo',"),
    (_DS, "$password = $input;"),
    (_DS, 'private_key "";'),
    (_DS, "X-JFrog-Art-Api: $API_KEY"),
    (_TH, "database:\n  host: $DB_HOST\n  port: $DB_PORT\n  username: $DB_USERNAME\n  password: $DB_PASS  # IMPORTANT: Do "
          "not share this password publicly"),
    (_GL, "client_vpn_endpoint_id = aws_ec2_client_vpn_endpoint.client-vpn-endpoint.id"),
    (_GL, "password combination.\n\nR5: Regulatory--21"),
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


def _fixture_samples() -> list[tuple[str, str, str]]:
    """(source, secret or "" for a look-alike, text) from bench/redaction_public/fixtures.py: the
    scanners' own true and false positives, whole, as their tests write them."""
    import random

    from .redaction_public import fixtures as f
    rng = random.Random(8)  # newPlausibleSecret draws: the same values every run
    out: list[tuple[str, str, str]] = []
    out += [("gitleaks-generic", secret, text) for text, secret in f.GITLEAKS_GENERIC_TP]
    for template, alphabet, n in f.GITLEAKS_GENERIC_TP_TEMPLATES:
        for _ in range(3):
            secret = f.plausible(rng, alphabet, n)
            out.append(("gitleaks-generic", secret, template.format(secret)))
    out += [("gitleaks-generic", "", text) for text in f.GITLEAKS_GENERIC_FP]
    out += [("gitleaks-curl", secret, text) for text, secret in f.GITLEAKS_CURL_TP]
    out += [("gitleaks-curl", "", text) for text in f.GITLEAKS_CURL_FP]
    out += [("gitleaks-kubernetes", secret, text) for text, secret in f.GITLEAKS_KUBERNETES_TP]
    out += [("gitleaks-kubernetes", "", text) for text in f.GITLEAKS_KUBERNETES_FP]
    out += [("detect-secrets-keyword", f.DS_KEYWORD_SECRET, text) for text in f.DS_KEYWORD_TP]
    out += [("detect-secrets-keyword", "", text) for text in f.DS_KEYWORD_FP]
    # measured once after the rules were written (never tuned to): aws.go and jwt.go
    for key_id in f.GITLEAKS_AWS_TP_IDS:
        out += [("gitleaks-aws (unseen)", key_id, t) for t in
                (f"aws_access_key_id = {key_id}", f'{{"AccessKeyId": "{key_id}"}}', f"export AWS_KEY={key_id}", key_id)]
    out += [("gitleaks-aws (unseen)", "", text) for text in f.GITLEAKS_AWS_FP]
    out += [("gitleaks-jwt (unseen)", secret, text) for text, secret in f.GITLEAKS_JWT_TP]
    return out


def samples() -> list[Sample]:
    out = []
    for source, secret, text in _fixture_samples():
        out.append(Sample(source, "fixture" if secret else "lookalike", secret, text, _held(secret + "\0" + text)))
    for s in SECRETS:
        for ctx, text in _contexts(s):
            out.append(Sample(s.source, ctx, s.value, text, _held(s.value)))
    for source, value, text in WHOLE:
        out.append(Sample(source, "fixture", value, text, _held(value)))
    for source, text in LOOKALIKES:
        out.append(Sample(source, "lookalike", "", text, _held(text)))
    return out
