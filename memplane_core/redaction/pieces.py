"""Multi-line secrets wherever they are cut. Memory text is cut all the time — a snippet packed to
the budget, an episode split into pieces, a paste that stops halfway — so a private key must be
found with its `-----END …-----` line missing, and its body must be found with no header at all.

Three shapes, each RE2 (linear on any input):
- a PEM private-key header: the header, its `Proc-Type:`/`DEK-Info:`/`Version:` fields and the
  whole base64 run after it, footer or not;
- a bare run of key-body lines (a middle piece): by shape — lines of 40–100 base64 characters with
  both cases and digits, as PEM, OpenSSH and PGP armour write them — unless the text around says it
  is something public (a certificate or public-key block, an SRI/lockfile hash, a data: URI);
- keyed one-line encodings of a key: kubeconfig `client-key-data`, a base64-encoded PEM
  (`LS0tLS1CRUdJTi…`), `.npmrc` `_authToken`/`_auth`/`_password`, a service account's
  `private_key_id`.

Line breaks are matched as a newline or as the two characters `\\n` (a key inside a JSON or .env
string read as text)."""

from __future__ import annotations

import base64

import re2

from .checks import looks_placeholder, looks_reference, shannon_entropy
from .rule import Rule, rule

_NL = r"(?:\r?\n|\\r\\n|\\n)"
_B64 = r"[A-Za-z0-9+/=]"
_PEM_HEAD = r"-----BEGIN[ A-Z0-9_]{0,100}PRIVATE KEY(?: BLOCK)?-----"

# the header, optional armour fields, one optional blank line, then every base64 line up to the
# first line that is not one (or the footer, which is taken too)
_HEADER_TO_RUN = (
    _PEM_HEAD
    + r"(?:[ \t]*" + _NL + r"[ \t]*[A-Za-z][A-Za-z0-9\-]{0,40}:[^\r\n\\]{0,200})*"
    + r"(?:(?:(?:[ \t]*" + _NL + r"){1,2}[ \t]*" + _B64 + r"+|[ \t]" + _B64 + r"{20,})"
    + r"(?:[ \t]*" + _NL + r"[ \t]*" + _B64 + r"+|[ \t]" + _B64 + r"{20,})*)?"
    + r"(?:[ \t]*" + _NL + r"[ \t]*-----END[ A-Z0-9_]{0,100}PRIVATE KEY(?: BLOCK)?-----)?"
)

# a run of base64 lines holding at least one line of 40+ characters; refined in Python below
# lines break at a newline, an escaped `\n`, or a space (text whose whitespace was collapsed, as
# an episode's pieces are)
_SEP = r"(?:[ \t]*" + _NL + r"[ \t]*|[ \t]+)"
_RUN = (r"(?:^|[^A-Za-z0-9+/=])((?:" + _B64 + r"+" + _SEP + r")*" + r"[A-Za-z0-9+/]{40,}={0,2}"
        + r"(?:" + _SEP + _B64 + r"+)*)(?:[^A-Za-z0-9+/=]|$)")
_LINE_SPLIT = re2.compile(_SEP)
_ARMOUR_WIDTHS = (64, 70, 76)  # PEM, OpenSSH, PGP/MIME line widths

# who said a line, as memory text files it (`user: <line>`): a speaker label is not a name for a value
_SPEAKER = re2.compile(r"(?i)^(?:user|assistant|system|tool|human|ai|model|developer)[ \t]*:$")
_SSH_PUBLIC = re2.compile(r"(?:ssh|ecdsa|sk-ssh|sk-ecdsa)-[a-z0-9@.\-]{2,40}[ \t]*$")
_CONTEXT = 160  # characters either side a run's context is read from
# What a run right after (or before) one of these is: public material or a content hash.
_PUBLIC_BEFORE = ("CERTIFICATE-----", "PUBLIC KEY-----", "PUBLIC KEY BLOCK-----", "SIGNATURE-----", "MESSAGE-----",
                  "CERTIFICATE REQUEST-----", "PARAMETERS-----", "X509 CRL-----")
_HASH_PREFIXES = ("sha1-", "sha256-", "sha384-", "sha512-", "base64,", "sha256:", "sha512:")
_PUBLIC_AFTER = ("-----END CERTIFICATE", "-----END PUBLIC", "-----END PGP PUBLIC", "-----END PGP SIGNATURE",
                 "-----END PGP MESSAGE", "-----END X509", "-----END CERTIFICATE REQUEST", "-----END DH PARAMETERS",
                 "-----END EC PARAMETERS")


_UPPER = str.maketrans("", "", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("", "", "abcdefghijklmnopqrstuvwxyz")
_DIGIT = str.maketrans("", "", "0123456789")
_SYMBOL = str.maketrans("", "", "+/")


def _body_line(line: str) -> bool:
    """A full line of key material: 40–100 base64 characters, both cases and digits mixed in the
    way random bytes mix them (a path, a word run or a hex hash does not)."""
    core = line.rstrip("=")
    n = len(core)
    if not 40 <= n <= 100:
        return False
    upper = n - len(core.translate(_UPPER))
    lower = n - len(core.translate(_LOWER))
    digits = n - len(core.translate(_DIGIT))
    symbols = n - len(core.translate(_SYMBOL))
    return upper >= n * 0.15 and lower >= n * 0.15 and digits + symbols >= 2 and digits >= 1 \
        and shannon_entropy(core) >= 4.2


def _fragment(line: str, at_line_start: bool) -> bool:
    """A cut piece of a body line next to a full one: random-looking, or alone on its line."""
    if any(c.isdigit() or c in "+/=" for c in line):
        return True
    return at_line_start and len(line) >= 8 and any(c.isupper() for c in line) and any(c.islower() for c in line)


def _pieces(text: str, s: int, e: int) -> list[tuple[int, int]]:
    """The run's lines as spans of `text`."""
    seg = text[s:e]
    if "\\" not in seg:  # plain whitespace: str.split, no regex call per line
        out, pos = [], 0
        for part in seg.split():
            pos = seg.find(part, pos)
            out.append((s + pos, s + pos + len(part)))
            pos += len(part)
        return out
    out, pos = [], s
    for m in _LINE_SPLIT.finditer(text[s:e]):
        out.append((pos, s + m.start()))
        pos = s + m.end()
    out.append((pos, e))
    return [(a, b) for a, b in out if b > a]


def _line_start(text: str, a: int) -> bool:
    lo = max(0, a - 8)
    before = text[lo:a].rstrip(" \t\"'")
    return a == 0 or before == "" and lo == 0 or before.endswith(("\n", "\\n")) or text[a - 1] == "\n"


def _alone(text: str, a: int, b: int) -> bool:
    """Nothing but blanks and quotes beside `text[a:b]` on its line (a line ends at a newline or at
    an escaped `\\n`)."""
    before = text[max(0, a - 200):a]
    cut = max(before.rfind("\n") + 1, before.rfind("\\n") + 2 if "\\n" in before else 0)
    if cut == 0 and a > 200:
        return False
    after = text[b:b + 200]
    ends = [i for i in (after.find("\n"), after.find("\\n")) if i >= 0]
    if not ends and b + 200 < len(text):
        return False
    left = before[cut:].strip(" \t\"'`")
    return (left == "" or _SPEAKER.search(left) is not None) and after[:min(ends) if ends else None].strip(" \t\"'`,;\r") == ""


def _encoded_text(run: str) -> bool:
    """Base64 of text (a JSON body, a sentence), not of key material: a key's bytes (DER, OpenSSH's
    binary format, PGP packets) are mostly unprintable; text's are all printable."""
    core = "".join(run.split())[:160]
    core = core[: len(core) // 4 * 4]
    try:
        raw = base64.b64decode(core, validate=True)
    except ValueError:
        return False
    return len(raw) >= 24 and sum(32 <= b < 127 or b in (9, 10, 13) for b in raw) >= 0.97 * len(raw)


def refine_run(text: str, s: int, e: int) -> tuple[int, int] | None:
    """The key-body lines of a base64 run, or None when the run is no key body: no full body line,
    or the text around it says it is a certificate, a public key, a content hash or a data URI."""
    lines = _pieces(text, s, e)
    first = next((i for i, (a, b) in enumerate(lines) if _body_line(text[a:b])), None)
    if first is None:
        return None
    last = next(i for i in range(len(lines) - 1, first - 1, -1) if _body_line(text[lines[i][0]:lines[i][1]]))
    if any(len(text[a:b].rstrip("=")) > 100 for a, b in lines[first:last + 1]):
        return None  # one long single-line blob (an image, a bundle), not wrapped key armour
    fa, fb = lines[first]
    if fa > 0 and text[fa - 1] == "\\" and text[fa] in "nrt":
        fa += 1  # the line began inside an escaped line break (`\n` in a JSON string read as text)
    if first == last and not _alone(text, fa, fb) and len(text[fa:fb].rstrip("=")) not in _ARMOUR_WIDTHS \
            and fb - fa not in _ARMOUR_WIDTHS:
        return None  # one value with a name or code beside it: left to the rules that read names
    if text.startswith("AAAA", fa) and _SSH_PUBLIC.search(text[max(0, fa - 48):fa]):
        return None  # an OpenSSH public key (`ssh-ed25519 AAAA… user@host`, authorized_keys, known_hosts)
    while first > 0 and _fragment(text[lines[first - 1][0]:lines[first - 1][1]], _line_start(text, lines[first - 1][0])):
        first -= 1
    n = len(lines)
    while last + 1 < n and _fragment(text[lines[last + 1][0]:lines[last + 1][1]], True):
        last += 1
    a, b = lines[first][0], lines[last][1]
    if a > 0 and text[a - 1] == "\\" and text[a] in "nrt":
        a += 1  # the run began inside an escaped line break (`\n` in a JSON string read as text)
    before = text[max(0, a - _CONTEXT):a]
    after = text[b:b + _CONTEXT]
    head = before.rstrip(" \t\r\n\\n\"'")
    if head.endswith(_PUBLIC_BEFORE) or before.rstrip().endswith(_HASH_PREFIXES) or before.endswith(_HASH_PREFIXES):
        return None
    if "integrity" in before[-40:].lower() or _encoded_text(text[a:b]):
        return None
    if after.lstrip(" \t\r\n\\n\"'").startswith(_PUBLIC_AFTER):
        return None
    return a, b


def _header_body(v: str) -> bool:
    """A header with key material after it (a header alone, quoted in documentation, is no secret)."""
    body = v.split("-----", 3)[-1]
    return sum(c.isalnum() or c in "+/" for c in body) >= 16 and "..." not in body


def _encoded_pem(v: str) -> bool:
    """A base64-encoded PEM block (Kubernetes, kubeconfig, CI variables): `LS0tLS1CRUdJTi…`
    decodes to `-----BEGIN `; a private key's header names one."""
    head = v[:80]
    head = head[: len(head) // 4 * 4]
    try:
        decoded = base64.b64decode(head).decode("ascii", "replace")
    except ValueError:
        return False
    return "PRIVATE KEY" in decoded or "PRIVATE K" in decoded


def _keyed_value(v: str) -> bool:
    return not looks_placeholder(v) and not looks_reference(v) and len(v) >= 8


PIECE_RULES: tuple[Rule, ...] = (
    rule("private_key", _HEADER_TO_RUN, ["PRIVATE KEY"], check=_header_body),
    # the footer's side of a cut: the base64 lines right above a private-key footer, however short
    rule("private_key", r"(?:^|[^A-Za-z0-9+/=])((?:" + _B64 + r"+[ \t]*" + _NL + r"[ \t]*)*" + _B64 + r"+)[ \t]*"
         + _NL + r"[ \t]*-----END[ A-Z0-9_]{0,100}PRIVATE", ["-----END"], group=1,
         check=lambda v: any(c.isdigit() or c in "+/=" for c in v)),
    rule("private_key", r"\b(LS0tLS1CRUdJTi[A-Za-z0-9+/]{20,}={0,2})", ["LS0tLS1CRUdJTi"], group=1,
         check=_encoded_pem),
    # kubeconfig: the client key, base64 on one line, whether or not the cut left its header
    rule("private_key", r"(?i)\bclient-key-data:[ \t]*[\"']?([A-Za-z0-9+/]{8,}={0,2})", ["client-key-data"],
         icase=True, group=1, check=_keyed_value),
    # a Kubernetes TLS/SSH Secret's key entry outside a `kind: Secret` document (a piece of one)
    rule("private_key", r"(?m)^[ \t]*[\"']?(?:tls\.key|ssh-privatekey|id_rsa|id_ed25519|id_ecdsa)[\"']?:[ \t]*"
         r"[\"']?([A-Za-z0-9+/]{16,}={0,2})", ["tls.key", "ssh-privatekey", "id_rsa", "id_ed25519", "id_ecdsa"],
         icase=True, group=1, check=_keyed_value),
    # .npmrc: `//registry.npmjs.org/:_authToken=…` (legacy tokens are UUIDs), `_auth=`, `_password=`
    rule("npmrc_auth", r"(?i)(?:^|[\s:/])_(?:authToken|auth|password)[ \t]*=[ \t]*[\"']?([^\s\"']{6,})",
         ["_authtoken", "_auth", "_password"], icase=True, group=1, check=_keyed_value),
    # a service account's key id names the key pair: `"private_key_id": "<40 hex>"`
    rule("gcp_service_account", r"\"private_key_id\"[ \t]*:[ \t]*\"([0-9a-f]{40})\"", ["private_key_id"],
         group=1),
)

# the bare body of a key, by shape and context (a middle piece of a cut key): run after every other
# rule, so a one-line token that also has this shape is reported under its own kind
KEY_BODY_RULE = rule("private_key", _RUN, group=1, refine=refine_run)
