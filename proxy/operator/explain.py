"""Why a turn got the memories it got: a bounded record of recent turns' recall, kept in memory
for `GET /memplane/turns/{turn_id}` and `memplane explain`.

Recording is a dict insert per turn (the ledger already holds the turn itself); the oldest
explanations are dropped past MAX_TURNS, so memory stays bounded.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MAX_TURNS = 1_000  # ~16 KB each at most (the block is up to ~12 KB): ~16 MB


class TurnExplanations:
    def __init__(self, max_turns: int = MAX_TURNS) -> None:
        self.max_turns = max_turns
        self._turns: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def record(self, turn_id: str, doc: dict[str, Any]) -> None:
        self._turns[turn_id] = doc
        while len(self._turns) > self.max_turns:
            self._turns.popitem(last=False)

    def update(self, turn_id: str, **fields: Any) -> None:
        doc = self._turns.get(turn_id)
        if doc is not None:
            doc.update(fields)

    def get(self, turn_id: str) -> dict[str, Any] | None:
        return self._turns.get(turn_id)

    async def fetch(self, turn_id: str) -> dict[str, Any] | None:
        """`get`, for callers that also serve a shared store (`shared_state.RedisExplanations`)."""
        return self.get(turn_id)

    def recent(self, agent_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        out = []
        for doc in reversed(self._turns.values()):
            if agent_id is None or doc.get("agent_id") == agent_id:
                out.append(doc)
                if len(out) >= limit:
                    break
        return out


def explanation(state: Any, turn_id: str) -> dict[str, Any] | None:
    """A turn's explanation (from `state.explanations`) with its ledger entry's retain state as of now."""
    doc = state.explanations.get(turn_id)
    if doc is None:
        return None
    doc = dict(doc)
    ctx = state.contexts.get(doc["agent_id"])
    if doc.get("entry_id") and state.retain is not None and ctx is not None and ctx.memory is not None \
            and ctx.memory.retain is not None:
        doc["retain_state"] = state.retain.entry_state(doc["agent_id"], doc["entry_id"], doc.get("ledger_end", 0))
    elif doc.get("entry_id"):
        doc["retain_state"] = "not retained (no retain endpoint)"
    else:
        doc["retain_state"] = "not ledgered (the provider did not answer 2xx)"
    return doc


# C0 and C1 controls, DEL included; kept: tab and newline. An agent's words reach the terminal
# through explanations: ESC/CSI/OSC would let them retitle it or write the clipboard (OSC 52).
_CONTROLS = {c: None for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}
_CONTROL_ESCAPES = {c: f"\\u{c:04x}" for c in range(0x7F, 0xA0)}


def terminal_safe(text: str) -> str:
    """Text for a terminal: control characters dropped (tab and newline kept)."""
    return text.translate(_CONTROLS)


def json_terminal_safe(json_text: str) -> str:
    """JSON for a terminal: C0 controls are already escaped by the encoder; DEL and C1 get `\\u00XX`
    too (only string contents can hold them, so the JSON stays valid and equal)."""
    return json_text.translate(_CONTROL_ESCAPES)


def render_text(doc: dict[str, Any]) -> str:
    """The explanation for people (what `memplane explain` prints), safe to print to a terminal."""
    lines = [f"turn {doc['turn_id']}  agent {doc['agent_id']}  {doc['ts']}  {doc['format']}",
             f"recall: {doc['recall']['status']}  latency {doc['recall'].get('latency_ms', 0):.1f} ms"
             f"  service {doc.get('service') or '-'}" + (f"  ranking {doc['ranking']}" if doc.get("ranking") else "")
             + (f"  told {doc['deadline_ms']} ms" if isinstance(doc.get("deadline_ms"), int) else "")
             + (f"  degraded: {doc['degraded']}" if doc.get("degraded") else "")]
    if doc.get("query"):
        lines.append(f"query: {doc['query'][:200]!r}")
    for i, m in enumerate(doc.get("memories", []), 1):
        lines.append(f"  {i:>2}. [{m['decision']}] kind={m.get('kind')} source={m.get('source')} "
                     f"origin={m.get('origin') or '-'}" + (f" writer={m['writer']}" if m.get("writer") else "") + " "
                     f"score={m.get('score')}  {str(m.get('text', ''))[:100]!r}")
    if doc.get("redactions"):
        lines.append("redacted: " + ", ".join(f"{k} x{n}" for k, n in doc["redactions"].items()))
    if doc.get("block"):
        lines.append(f"injected ({doc.get('placement')}):")
        lines += ["  " + ln for ln in doc["block"].splitlines()]
    lines.append(f"ledger entry: {doc.get('entry_id') or '-'}  retain: {doc.get('retain_state', '-')}")
    return terminal_safe("\n".join(lines))
