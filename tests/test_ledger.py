"""The ledger is the durable record: stable, re-derivable ids, crash-tolerant reads."""

from __future__ import annotations

import hashlib

import orjson

from proxy.ledger.files import Ledger, build_entry


def _entry(**kw):
    base = dict(agent_id="a", path="/v1/chat/completions", requested_model="m", provider="openai",
                effective_model="m", status_code=200, stream=False, request_original={"messages": []},
                request_effective={"messages": []}, response={"format": "json", "json": {}}, usage=None,
                ts="2026-11-20T10:00:00.000Z")
    base.update(kw)
    return build_entry(**base)


def test_ids_are_stable_and_rederivable_from_the_line(tmp_path):
    entry = _entry(request_original={"messages": [{"role": "user", "content": "héllo ✓"}]})
    assert entry["id"] == _entry(request_original={"messages": [{"role": "user", "content": "héllo ✓"}]})["id"]
    assert entry["id"] != _entry(ts="2026-11-20T10:00:00.001Z")["id"]
    assert list(entry)[:3] == ["version", "id", "ts"]

    ledger = Ledger(tmp_path)
    ledger.append_blocking("a", entry)
    line = (tmp_path / "a" / "history.jsonl").read_bytes().splitlines()[0]
    doc = orjson.loads(line)
    eid = doc.pop("id")
    assert eid == "hist1_" + hashlib.sha256(orjson.dumps(doc)).hexdigest()
    # the stdlib serializer with compact separators gives the same bytes for such entries
    import json
    assert hashlib.sha256(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest() == eid[6:]


def test_a_torn_last_line_is_skipped_and_the_next_append_stays_readable(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append_blocking("a", _entry(ts="2026-11-20T10:00:00.001Z"))
    ledger.close()
    with open(tmp_path / "a" / "history.jsonl", "ab") as fh:
        fh.write(b'{"version":1,"id":"hist1_torn","ts":"2026-')  # killed mid-write
    torn = []
    assert len(list(Ledger(tmp_path).read("a", on_torn=torn.append))) == 1 and torn == [1]
    ledger = Ledger(tmp_path)
    ledger.append_blocking("a", _entry(ts="2026-11-20T10:00:00.002Z"))
    entries = [r.entry for r in ledger.read("a")]
    assert [e["ts"] for e in entries] == ["2026-11-20T10:00:00.001Z", "2026-11-20T10:00:00.002Z"]


def test_after_index_seeks_instead_of_rescanning(tmp_path):
    ledger = Ledger(tmp_path)
    for i in range(2000):
        ledger.append_blocking("a", _entry(ts=f"2026-11-20T10:{i // 60:02d}:{i % 60:02d}.000Z"))
    offset = ledger.seek_offset("a", "2026-11-20T10:30:00.000Z")
    assert offset > 0
    after = [r.entry["ts"] for r in ledger.read("a", start_offset=offset) if r.entry["ts"] > "2026-11-20T10:30:00.000Z"]
    assert len(after) == 2000 - 1801
    # the index is incremental: new lines extend it, old lines are not re-read
    ledger.append_blocking("a", _entry(ts="2026-11-20T11:00:00.000Z"))
    assert ledger.seek_offset("a", "2026-11-20T10:59:00.000Z") >= offset
