"""A client-chosen session id as a key of an in-memory book (taint, main calls, recurrence).

Those books are bounded by entries, not bytes: a session id is whatever the client sends (an
`X-Session-Id` header of 8 KB, a `metadata.session_id` of megabytes), so a
client naming a new long session every call would hold entries × that size. A long id is kept as
its digest instead: the same id still finds the same entry, and an entry costs at most ~100 bytes.
"""

from __future__ import annotations

import hashlib

MAX_CHARS = 128


def session_key(session: str) -> str:
    """`session` itself when short (the usual UUID or ULID), else a fixed-size digest of it."""
    if len(session) <= MAX_CHARS:
        return session
    return "sha256:" + hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()
