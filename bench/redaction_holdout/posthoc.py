"""A post-hoc check: phrasings written AFTER the rules of issue 50, run once and never tuned on, over the
held-out vendors' formats (so it measures the phrasing, not the value, as unseen). Two earlier post-hoc
sets were used to tune the named detector and are not kept; this third one was not.

    python -m bench.redaction_holdout.posthoc
"""

import random

from memplane_core.redact import Redactor
from memplane_core.redaction.corpus import redacted

from .__main__ import leaked
from .generate import VENDORS, held_out

T = [
 "Got it. For reference the {N} access key = {s}.",
 "{N} ({w}): {s}",
 "{U}_API_TOKEN: {s}  # rotate quarterly",
 "'{slug}': {{ 'key': '{s}', 'region': 'eu' }}",
 "Please store my {N} {w} {s} in the vault",
 "api-key={s}",
 "TOKEN {s}",
 "{N} - secret: {s}",
 "  {slug}_secret_key: {s}",
 "const client = new {T}({{ apiKey: \"{s}\" }});",
 "if token == \"{s}\":",
 "<Password>{s}</Password>",
 "x-{slug}-signature: {s}",
 "Connection: Server=db;Uid=svc;Pwd={s};",
 "{N} auth token is {s}, expires never",
 "{slug} pass: {s}",
 "Re: {N} — here you go: key {s}",
 "DEBUG request headers={{'Authorization': 'Bearer {s}'}}",
]
TW = ["$SECRET", "not-set", "{slug}_default", "rotated-2024", "from vault", "see wiki", "EXAMPLE", "1.4.2", "null"]
COLL = [
 "The key to success is consistency and the token economy matters.",
 "Use the access key you created in step 2, then paste the secret into the form.",
 "token = tokenizer.encode(text)[0]",
 "api_key_header = APIKeyHeader(name='X-API-Key')",
 "if not password: raise ValueError('password required')",
 "secret_name = f'{env}-db-credentials'",
 "license: MIT",
 "License Key: see the email from sales",
 "auth = HTTPBasicAuth(user, pw)",
 "Bearer tokens are described in RFC 6750; the token endpoint is /oauth/token.",
 "The webhook URL is configured under Settings > Webhooks.",
 "password_reset_token_ttl = 3600",
 "keyboard shortcuts: Ctrl+K opens search",
 "primary key (id), unique key (email_hash)",
 "signature = hmac.new(secret, msg, hashlib.sha256).hexdigest()",
 "We rotated every key last Tuesday after the incident review.",
 "The DSN format is postgres://user:password@host/db",
 "KEY_ID=$(aws kms list-keys --query 'Keys[0].KeyId' --output text)",
 "git commit -m 'rotate token handling (no secrets in logs)'",
 "sha256 checksum: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
]

def main() -> None:
    g = random.Random(31337)
    r = Redactor()
    found = total = tw = twc = 0
    miss = {}; twm = {}
    for v in VENDORS:
        if not held_out(v.name):
            continue
        kw = dict(N=v.name, w=v.word, U=v.slug.upper(), slug=v.slug, T="".join(p.title() for p in v.slug.split("_")))
        for t in T:
            s = v.make(g)
            text = t.format(s=s, **kw)
            out = redacted(r, text)
            total += 1
            ok = not leaked(s, out); found += ok
            if not ok: miss[t] = miss.get(t, 0) + 1
            twin = t.format(s=g.choice(TW).format(**kw), **kw)
            tw += 1
            if redacted(r, twin) != twin:
                twc += 1; twm[t] = twm.get(t, 0) + 1
    cc = [c for c in COLL if r.text(c)[0] != c]
    print(f"third post-hoc set, held-out vendors: recall {found/total:.3f} ({found}/{total}); twins changed {twc/tw:.3f} ({twc}/{tw}); prose/code collateral changed {len(cc)}/{len(COLL)}")
    for k, n in sorted(miss.items(), key=lambda x: -x[1]): print("miss", n, repr(k))
    for k, n in sorted(twm.items(), key=lambda x: -x[1]): print("twin", n, repr(k))
    for c in cc: print("coll", repr(c), "=>", repr(r.text(c)[0]))


if __name__ == "__main__":
    main()
