"""A credential from a service no rule names is found by its name and its shape (issue 50), and
text that only looks like one — an image URL with `xoxo` in it, an Objective-C `hf_` method, a
shell substitution, an API object id, a memory's key — comes back unchanged."""

from __future__ import annotations

import random
import string
import zlib

import pytest

from bench.redaction_holdout import generate
from bench.redaction_holdout.__main__ import leaked, score
from memplane_core.redact import Redactor
from memplane_core.redaction.named import random_value
from tests.test_redaction_linear_time import ORDINARY, SIZE, _best_of, _fit, _scan_all

ALNUM = string.ascii_letters + string.digits


def _key(rng: random.Random, n: int = 32, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


# a service memplane has never heard of, its key in no known format, written the ways people write it
CONTEXTS = (
    "the Quillbase secret key is {}",
    "Quillbase token - '{}'",
    "Quillbase: {} / ops@quillbase.example",
    "[DEBUG] Using Key={}",
    '\tquillKey := "{}"',
    "const quillbaseToken = '{}';",
    'client = Quillbase(api_key="{}")',
    "quillbase:\n  url: https://api.quillbase.example\n  apiKey: {}\n",
    "[quillbase]\nsecret = {}\n",
    "<dataSource><password>{}</password></dataSource>",
    "https://api.quillbase.example/v1/report?license_key={}&format=csv",
    "POST https://hooks.quillbase.example/webhooks/{}",
    "jdbc:mysql://db:3306/app?user=svc&password={}",
    "Server=db;User ID=svc;Password={};",
    "amqp://svc:{}@mq.internal/vhost",
    "$ quill login --token {}",
    "  - name: QUILL_TOKEN\n    value: \"{}\"",
    '"{}"  # Quillbase api key',
    "new quillbase secret:\n{}\n",
    "**Quillbase token**: `{}`",
    "Quillbase creds -> {}",
    "I rotated the Quillbase key, new one = {}",
)


@pytest.mark.parametrize("template", CONTEXTS)
@pytest.mark.parametrize("alphabet", [ALNUM, "0123456789abcdef", ALNUM + "-_"], ids=["alnum", "hex", "urlsafe"])
def test_an_unknown_services_key_is_redacted_where_people_write_it(template, alphabet):
    rng = random.Random(zlib.crc32((template + alphabet).encode()))
    secret = _key(rng, 32, alphabet)
    text = template.format(secret)
    out, counts = Redactor().text(text)
    assert not leaked(secret, out), out
    assert "[redacted:" in out and sum(counts.values()) >= 1


@pytest.mark.parametrize("text", [
    "the Quillbase secret key is stored in 1Password",
    "[DEBUG] Using Key=default",
    "2026-11-20T10:00:00Z DEBUG quill.client: init with token=from-env region=eu-west-1",
    'client = Quillbase(api_key="X-Api-Key", timeout=30)',
    'client = Quillbase(api_key=os.environ["QUILL_API_KEY"])',
    "quillbase:\n  apiKey: ${QUILL_API_KEY}\n",
    "[quillbase]\nsecret = !vault secret/quillbase#token\n",
    "<dataSource><password>/run/secrets/quill</password></dataSource>",
    "Server=db;User ID=svc;Password={password};",
    "https://api.quillbase.example/v1/items?sort_key=created_at&page_token=page2",
    "Quillbase token: revoked",
    "pinned quillbase==2.14.1 by version",
    'quill.api_key = "quillbase-prod-v2"',
    "  - name: QUILL_TOKEN\n    valueFrom:\n      secretKeyRef:\n        name: quill-credentials",
    '"https://api.quillbase.example/v1"  # Quillbase api key goes in the header',
    "new quillbase secret:\nask ops for it\n",
])
def test_a_credential_word_with_no_credential_after_it_changes_nothing(text):
    assert Redactor().text(text)[0] == text


@pytest.mark.parametrize("text", [
    "![party](https://cdn.pics.example/images/2025/xoxo-summer-12.jpg)",
    "https://i.pinimg.com/736x/3f/a2/xoxo_love_5d41402abc4b2a76b9719d911017c592.png",
    "- (void)hf_setupConstraintsForView:(UIView *)view animated:(BOOL)animated;",
    "[self hf_setupConstraintsForViewAnimatedWithDuration];",
    "![x](https://cdn.pics.example/images/xoxo-gossip-girl-wallpaper.jpg)",
    "hugs and kisses, xoxo-forever-yours",
    "KEY=$(openssl rand -hex 32)",
    "export GITHUB_TOKEN=$(gh auth token)",
    "password hint: first pet + year",
    "The key insight is that caching halves the latency; the token budget is 4k.",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8\n\n    fix token refresh race",
    "request 3fa85f64-5717-4562-b3fc-2c963f66afa6 failed: token expired",
    'tool result for call_Xy7Hq2LmN8pQrS4tUv6wZa1B and toolu_01A09q90qw90lq917835lq9',
    "previous_response_id=resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
    "the payload was eyJ1c2VyIjogImRhbmEiLCAicm9sZSI6ICJ2aWV3ZXIiLCAidGhlbWUiOiAiZGFyayJ9 as expected",
])
def test_what_only_looks_like_a_secret_is_kept(text):
    assert Redactor().text(text)[0] == text


def test_a_memorys_key_and_an_encoded_text_body_survive_the_json_walk():
    doc = {"key": "project.deadline_v2", "value": "prefers dark theme",
           "episode": {"key": "episode:hist1_d79367ee1578b7e94004929010a2b7d0b862cf998f6060ddf22876da18989eb1#1"},
           "body": "eyJ1c2VyIjogImRhbmEiLCAicm9sZSI6ICJ2aWV3ZXIiLCAidGhlbWUiOiAiZGFyayJ9"}
    assert Redactor().json(doc)[0] == doc


def test_a_vendor_prefixed_key_in_no_rule_set_is_redacted_but_ids_and_publishable_keys_are_kept():
    rng = random.Random(50)
    mixed = "qb_pt_" + _key(rng, 40)
    out, _ = Redactor().text(f"use {mixed} for the nightly job")
    assert mixed not in out and "[redacted:vendor_token]" in out
    # a hex body alone is as often a content hash or an object id as a key: found when named
    hexkey = "sbx_" + _key(rng, 40, "0123456789abcdef")
    assert hexkey not in Redactor().text(f"the Sandbox API key is {hexkey}")[0]
    for kept in (f"checkout uses pk_live_{_key(rng, 40)}", f"entry hist1_{_key(rng, 64, '0123456789abcdef')} retained",
                 f"episode ep_{_key(rng, 32, '0123456789abcdef')} filed"):
        assert Redactor().text(kept)[0] == kept


@pytest.mark.parametrize("value, expected", [
    ("Xq7vK2mP9sL4tR8w", True), ("3f9a1c7e5b2d8f4a6c0e9b1d7f3a5c8e", True), ("u+Wq-7sX2vBn_L0pZk9R", True),
    ("from-env", False), ("X-Api-Key", False), ("setupConstraintsForView", False), ("v4.18.0", False),
    ("SalesResults-1.2", False), ("ops@acme.io", False), ("/run/secrets/db", False), ("${DB_PASSWORD}", False),
    ("user:42:profile", False), ("cl100k_base", False), ("GITHUB_TOKEN", False),
])
def test_random_value_tells_a_generated_value_from_a_name(value, expected):
    assert random_value(value) is expected


def test_the_committed_corpus_is_what_its_generator_writes():
    """The evaluation data cannot drift from its generator (edited to make a rule pass)."""
    assert [i for i in generate.build()] == generate.load()


def test_the_held_out_vendors_meet_the_recall_and_collateral_targets():
    items = [i for i in generate.load() if i.split == "held-out"]
    total = score(items, Redactor())["rows"]["total"]
    assert total["recall"] >= 0.97, total
    assert total["twin_fp"] <= 0.02 and total["collateral_fp"] <= 0.02, total


HOSTILE = {
    "key is + value x N": lambda n: _fit("the secret key is Xq7vK2mP9sL4tR8w ", n),
    "token - + quote x N": lambda n: _fit("token - '", n),
    "value / email x N": lambda n: _fit("Xq7vK2mP9sL4tR8wZ / a@b.io ", n),
    "one webhook path": lambda n: "/webhooks/" + _fit("aB3x/", n),
    "prefix_ runs": lambda n: _fit("ab_cd_ef_", n),
    "Key= without values": lambda n: _fit("Key=", n),
}


def test_the_named_detector_is_linear_on_hostile_text():
    redactor = Redactor()
    base = _best_of(lambda: _scan_all(redactor, _fit(ORDINARY)))
    for name, build in HOSTILE.items():
        full, quarter = build(SIZE), build(SIZE // 4)
        took = _best_of(lambda t=full: _scan_all(redactor, t))
        growth = took / _best_of(lambda t=quarter: _scan_all(redactor, t))
        if growth >= 7:  # a busy machine's reading is measured again, carefully
            growth = _best_of(lambda t=full: _scan_all(redactor, t), 5) / _best_of(
                lambda t=quarter: _scan_all(redactor, t), 5)
        assert took / base < 1000 and growth < 9, (name, took / base, growth)
