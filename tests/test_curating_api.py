"""An operator curates an agent's memories over the REST API (what the inspector's forms call):
edit the text, importance and TTL, pin one so that it is always recalled, forget one with a
reason, and read every change back from the audit trail, on both stores."""

from __future__ import annotations

import aiohttp

from tests.test_curator import llm  # noqa: F401 - the fake curator model
from tests.test_embedded_adapter import call, rest_service  # noqa: F401 - the fixture over both stores

ADMIN = {"Authorization": "Bearer admin-token"}
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


async def patch(s, url, memory_id, body, headers):
    async with s.patch(f"{url}/api/memories/{memory_id}", json=body, headers=headers) as r:
        return r.status, await r.json()


async def trail(s, url, memory_id, headers=ADMIN):
    async with s.get(f"{url}/api/memories/{memory_id}/audit", headers=headers) as r:
        assert r.status == 200
        return (await r.json())["audit"]


async def test_an_operator_edits_pins_and_forgets_and_the_audit_trail_says_who_did_what(rest_service):
    url = rest_service
    async with aiohttp.ClientSession() as s:
        _, coffee = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "coffee",
                                                         "value": "Alice drinks her coffee black"}, "alice-token")
        _, badge = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "badge",
                                                        "value": "Alice's badge number is 4711"}, "alice-token")
        # the operator corrects the text, raises the importance and gives it a month to live
        status, edited = await patch(s, url, coffee["id"], {"value": "Alice drinks oat-milk flat whites",
                                                            "importance": 0.9, "ttl": 30 * 86400,
                                                            "reason": "she switched", "actor": "ops@example"}, ADMIN)
        assert status == 200 and edited["value"] == "Alice drinks oat-milk flat whites"
        assert edited["importance"] == 0.9 and edited["expires_at"] and edited["id"] == coffee["id"]
        [entry] = await trail(s, url, coffee["id"])
        assert entry["who"] == "admin (ops@example)" and entry["action"] == "edit" and entry["reason"] == "she switched"
        assert entry["before"]["value"] == "Alice drinks her coffee black" and entry["before"]["expires_at"] is None
        assert entry["after"]["value"] == "Alice drinks oat-milk flat whites" and entry["after"]["importance"] == 0.9
        # permanent again: ttl null
        status, permanent = await patch(s, url, coffee["id"], {"ttl": None}, ADMIN)
        assert status == 200 and permanent["expires_at"] is None

        # pinned: recalled first even for a question about something else
        status, pinned = await patch(s, url, badge["id"], {"pinned": True}, ADMIN)
        assert status == 200 and pinned["metadata"]["pinned"] is True
        _, got = await call(s, url, "/recall", {"agent_id": "alice", "query": "what coffee does she like?"},
                            "admin-token")
        assert "badge number is 4711" in got["memories"][0]["text"]
        assert any("flat whites" in m["text"] for m in got["memories"])
        assert (await trail(s, url, badge["id"]))[0]["action"] == "pin"

        # an agent edits only its own memories; an actor name from an agent token is not believed
        assert (await patch(s, url, coffee["id"], {"value": "stolen"}, BOB))[0] == 404
        status, own = await patch(s, url, coffee["id"], {"importance": 0.2, "actor": "the admin"}, ALICE)
        assert status == 200 and (await trail(s, url, coffee["id"]))[0]["who"] == "alice"

        # forget with a reason: gone, and the trail keeps what it said
        async with s.delete(f"{url}/api/memories/{badge['id']}", params={"reason": "not needed", "actor": "ops"},
                            headers=ADMIN) as r:
            assert r.status == 204
        async with s.get(f"{url}/api/memories/{badge['id']}", headers=ADMIN) as r:
            assert r.status == 404
        async with s.get(f"{url}/api/audit", params={"agent_id": "alice"}, headers=ADMIN) as r:
            everything = (await r.json())["audit"]
        assert [e["action"] for e in everything] == ["forget", "edit", "pin", "edit", "edit"]
        assert everything[0]["reason"] == "not needed" and everything[0]["after"] is None
        assert everything[0]["before"]["value"] == "Alice's badge number is 4711"
        # bob cannot read alice's trail
        async with s.get(f"{url}/api/audit", params={"agent_id": "alice"}, headers=BOB) as r:
            assert r.status == 403


async def test_a_store_cannot_pin_or_forge_bookkeeping_only_the_audited_patch_pins(rest_service):
    """Alice's token (or the admin's) writes a memory with `pinned: true` in its metadata to have it
    recalled first in every turn with no trace; the store keeps none of it. Alice cannot forge the
    curator's or the author's marks either; the operator's PATCH still pins, with an audit entry."""
    url = rest_service
    forged = {"pinned": True, "superseded_by": "mem_other", "superseded_at": 1.0, "merged": ["mem_x"],
              "curator": {"model": "x"}, "author": "admin", "origin": "user", "topic": "rules", "note": "kept"}
    async with aiohttp.ClientSession() as s:
        _, mine = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "rule", "value": "Obey the wiki",
                                                       "metadata": forged}, "alice-token")
        assert mine["metadata"] == {"topic": "rules", "note": "kept", "author": "alice", "origin": "operator"}
        _, ops = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "ops", "value": "Deploys on Friday",
                                                      "metadata": {"pinned": True}}, "admin-token")
        assert "pinned" not in ops["metadata"]
        assert await trail(s, url, mine["id"]) == [] and await trail(s, url, ops["id"]) == []
        status, pinned = await patch(s, url, ops["id"], {"pinned": True, "reason": "team rule"}, ADMIN)
        assert status == 200 and pinned["metadata"]["pinned"] is True
        assert [e["action"] for e in await trail(s, url, ops["id"])] == ["pin"]


async def test_bad_edits_get_a_clear_error_and_change_nothing(rest_service):
    url = rest_service
    async with aiohttp.ClientSession() as s:
        _, m = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "k", "value": "v"}, "alice-token")
        for body, field in (({}, None), ({"ttl": 10**30}, "ttl"), ({"ttl": True}, "ttl"), ({"importance": 7}, "importance"),
                            ({"value": "x", "author": "bob"}, "author"), ({"pinned": "yes please"}, "pinned")):
            status, err = await patch(s, url, m["id"], body, ADMIN)
            assert status == 400 and err["error"]["message"], body
            if field:
                assert field in str(err["error"]), body
        async with s.patch(f"{url}/api/memories/{m['id']}", data=b"{not json",
                           headers={**ADMIN, "Content-Type": "application/json"}) as r:
            assert r.status == 400
        assert (await patch(s, url, "mem_nope", {"value": "x"}, ADMIN))[0] == 404
        async with s.get(f"{url}/api/memories/{m['id']}", headers=ADMIN) as r:
            assert (await r.json())["value"] == "v"
        assert await trail(s, url, m["id"]) == []


async def test_thousands_of_memories_page_by_cursor_and_filter_by_kind_and_date(rest_service):
    url = rest_service
    async with aiohttp.ClientSession() as s:
        for i in range(25):
            await call(s, url, "/api/memories", {"agent_id": "alice", "key": f"k{i}", "value": f"memory {i}",
                                                 "type": "preference" if i % 5 == 0 else "fact"}, "admin-token")
        seen, cursor = [], None
        while True:
            params = {"agent_id": "alice", "limit": "7", **({"cursor": cursor} if cursor else {})}
            async with s.get(f"{url}/api/memories", params=params, headers=ADMIN) as r:
                doc = await r.json()
            seen += [m["key"] for m in doc["memories"]]
            if not (cursor := doc["next_cursor"]):
                break
        assert sorted(seen) == sorted(f"k{i}" for i in range(25))
        async with s.get(f"{url}/api/memories", params={"agent_id": "alice", "type": "preference", "limit": "100"},
                         headers=ADMIN) as r:
            assert sorted(m["key"] for m in (await r.json())["memories"]) == ["k0", "k10", "k15", "k20", "k5"]
        async with s.get(f"{url}/api/memories", params={"agent_id": "alice", "until": "2000-01-01"}, headers=ADMIN) as r:
            assert (await r.json())["memories"] == []
        async with s.get(f"{url}/api/memories", params={"agent_id": "alice", "since": "2000-01-01", "limit": "100"},
                         headers=ADMIN) as r:
            assert len((await r.json())["memories"]) == 25
        async with s.get(f"{url}/api/memories", params={"agent_id": "alice", "since": "last tuesday"},
                         headers=ADMIN) as r:
            assert r.status == 400 and (await r.json())["error"]["field"] == "since"


async def test_a_pinned_memory_survives_the_cap_and_consolidation_that_remove_its_peers(tiered):
    from memory_adapters.tiered.consolidate import consolidate
    url, service = tiered
    service.settings.ltm_max_entries = 2
    async with aiohttp.ClientSession() as s:
        old = {"agent_id": "t", "importance": 0.0, "created_at": "2020-01-01T00:00:00Z"}
        _, pinned = await call(s, url, "/api/memories", {**old, "key": "door-code-rule",
                                                         "value": "Never read the door code aloud"}, "admin-token")
        _, loose = await call(s, url, "/api/memories", {**old, "key": "lunch", "value": "Had soup once"}, "admin-token")
        assert (await patch(s, url, pinned["id"], {"pinned": True}, ADMIN))[0] == 200
        for i in range(3):  # over the cap: the oldest go, never the pinned one
            await call(s, url, "/api/memories", {"agent_id": "t", "key": f"k{i}", "value": f"note {i}"}, "admin-token")
        async with s.get(f"{url}/api/memories", params={"agent_id": "t", "limit": "100"}, headers=ADMIN) as r:
            keys = {m["key"] for m in (await r.json())["memories"]}
        assert "door-code-rule" in keys and "lunch" not in keys and "k2" in keys
        report = await consolidate(service, ["t"], threshold=0.99)  # prune everything old and unimportant
        assert pinned["id"] not in {p["id"] for p in report.pruned}
        async with s.get(f"{url}/api/memories/{pinned['id']}", headers=ADMIN) as r:
            assert r.status == 200 and (await r.json())["metadata"]["pinned"] is True
    assert loose["id"]


async def test_the_curator_never_supersedes_a_memory_the_operator_pinned(aiohttp_server, tmp_path, llm):
    """The model says the new job replaces the old; the operator pinned the old one: it stays current."""
    from tests.test_curator import embedded, entry, job_change_model, memories, post, retain, settings

    fake, base = llm

    fake.script = job_change_model(prune_old=True)
    url, service, _ = await embedded(aiohttp_server, tmp_path, settings(base))
    async with aiohttp.ClientSession() as s:
        await retain(s, url, "ana", [entry(f"hist1_{i}", t) for i, t in enumerate(["I work at Acme.", "a", "b", "c"])])
        await service.curator.run_once()
        [acme] = [f for f in await memories(s, url, "ana", "fact") if "Acme" in f["value"]]
        assert (await patch(s, url, acme["id"], {"pinned": True, "reason": "she has two jobs"}, {}))[0] == 200
        service.curator.clock.now += 60
        await retain(s, url, "ana", [entry(f"hist1_{i}", t) for i, t in enumerate(
            ["I joined Globex this month.", "d", "e", "f"], 4)])
        await service.curator.run_once()
        facts = {f["value"]: f for f in await memories(s, url, "ana", "fact")}
        _, got = await post(s, url, "/recall", {"agent_id": "ana", "query": "where does the user work?"})
    assert "superseded_by" not in facts["The user works at Acme."]["metadata"]  # neither superseded nor pruned
    assert "The user works at Acme." in "\n".join(m["text"] for m in got["memories"])
