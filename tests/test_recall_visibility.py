"""What a recall may see: a memory past its expiry, or said in another session, never comes back,
however well it matches — and a memory that expires or is scoped to a session is one ranking asks
about (others it does not look up: engine/index.py, `Visible`)."""

from __future__ import annotations

import time

from memory_adapters.engine.index import AgentIndex, RecallQuery, visible_in
from memory_adapters.engine.record import StoredMemory


def memory(key: str, text: str, **kw) -> StoredMemory:
    return StoredMemory(agent_id="a", scope=kw.pop("scope", "agent"), key=f"fact:{key}", value=text, id=key, **kw)


def recalled(idx: AgentIndex, visible) -> str:
    return "\n".join(p.text for p in idx.recall(RecallQuery("Where is the boat key?"), visible=visible))


def test_an_expired_memory_and_another_sessions_memory_stay_out_of_recall():
    now = time.time()
    idx = AgentIndex()
    idx.put(memory("old", "The boat key hides under the blue bucket.", expires_at=now - 1))
    idx.put(memory("draft", "The boat key is in the glovebox now.", scope="session", session_id="s-1"))
    idx.put(memory("fuel", "The boat needs fuel before Friday."))
    assert idx.conditional == {"old", "draft"}
    in_s1, in_s2 = recalled(idx, visible_in("s-1", now)), recalled(idx, visible_in("s-2", now))
    assert "glovebox" in in_s1 and "bucket" not in in_s1
    assert "glovebox" not in in_s2 and "bucket" not in in_s2 and "fuel" in in_s2

    idx.put(memory("old", "The boat key hides under the blue bucket."))  # its expiry lifted
    assert "bucket" in recalled(idx, visible_in("s-2", now)) and idx.conditional == {"draft"}


def test_any_other_filter_is_asked_about_every_memory():
    idx = AgentIndex()
    idx.put(memory("fuel", "The boat key is on the fuel can."))
    idx.put(memory("hook", "The boat key hangs on the hook."))
    shown = recalled(idx, lambda m: m.id != "hook")
    assert "fuel can" in shown and "hook" not in shown
