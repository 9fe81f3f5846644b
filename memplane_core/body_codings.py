"""Which content codings a caller's body may arrive in: one, or none.

Why: `Content-Encoding: gzip, gzip` says the body was compressed twice (RFC 9110 §8.4: codings are
listed in the order applied). aiohttp decodes one layer and hands on the rest, which every memplane
server then refused as JSON "not valid UTF-8" — a 400 that sent the caller looking in the wrong
place. A stacked coding is the caller's 415 (RFC 9110 §15.5.16: a coding the server does not
support), named as such, before the body is read."""

from __future__ import annotations

from collections.abc import Mapping


def stacked_coding(headers: Mapping[str, str]) -> str | None:
    """The `Content-Encoding` as sent when it lists more than one coding (`identity` aside), else None."""
    sent = ", ".join(headers.getall("Content-Encoding", ())) if hasattr(headers, "getall") else \
        headers.get("Content-Encoding", "")
    codings = [c.strip().lower() for c in sent.split(",") if c.strip() and c.strip().lower() != "identity"]
    return sent[:200] if len(codings) > 1 else None


def refusal_text(sent: str) -> str:
    return (f"The request body's Content-Encoding lists more than one coding ({sent}); "
            "send it in one coding (gzip, deflate) or none.")
