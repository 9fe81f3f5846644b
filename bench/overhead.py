"""Proxy overhead: the same fake provider reached directly, through a minimal aiohttp
pass-through, and through memplane (memory off, reference adapter, tiered adapter), at
concurrency 1 and 32, non-streaming and streaming. Peers are rows too when they install.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH

from . import peers
from .harness import QUICK, load, mongo, redis_url, role, table, write_results
from .seed import seed_reference, seed_tiered, turn_summaries

MEMORIES = 1000


def _peer_targets(stack: contextlib.ExitStack, prov_port: int, tmp: Path) -> tuple[list, dict[str, str]]:
    """Peers that install and start here, as (name, url, token) rows; the others with their reason."""
    targets, skipped = [], {}
    if not peers.enabled():
        return [], {"litellm-proxy": "skipped: BENCH_PEERS=off", "engram-proxy": "skipped: BENCH_PEERS=off"}
    try:
        url, key = stack.enter_context(peers.litellm_proxy(prov_port, tmp))
        targets.append(("litellm-proxy", url, key))
    except peers.PeerUnavailable as exc:
        skipped["litellm-proxy"] = f"skipped: {exc}"
    try:
        url = stack.enter_context(peers.engram_proxy(prov_port, tmp, turn_summaries(MEMORIES)))
        targets.append(("engram-proxy+memory", url, "bench"))
    except peers.PeerUnavailable as exc:
        skipped["engram-proxy"] = f"skipped: {exc}"
    return targets, skipped


def main() -> dict:
    requests = 300 if QUICK else 2000
    seconds = 8 if QUICK else 25
    tmp = Path(tempfile.mkdtemp(prefix="memplane-bench-"))
    rows: dict[str, dict] = {}
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        prov_port = stack.enter_context(role("provider"))
        upstream = f"http://127.0.0.1:{prov_port}/v1"
        targets: list[tuple[str, str, str]] = [("direct", f"{upstream}/chat/completions", "bench")]
        pt_port = stack.enter_context(role("passthrough", "--upstream", upstream))
        ref_port = stack.enter_context(role("reference", "--data-dir", str(tmp / "ref")))
        mongo_url = stack.enter_context(mongo(tmp))
        ctx, hist = tmp / "ctx", tmp / "hist"
        tok_off, _ = write_agent(ctx, "off")
        tok_ref, _ = write_agent(ctx, "ref", memory=memory_manifest("reference", f"http://127.0.0.1:{ref_port}",
                                                                    retain_batch_path=RETAIN_BATCH_PATH))
        seed_reference(tmp / "ref", "ref", MEMORIES)
        targets.append(("passthrough", f"http://127.0.0.1:{pt_port}/v1/chat/completions", "bench"))
        rurl = redis_url()
        tok_tier = None
        if rurl and mongo_url:
            asyncio.run(seed_tiered(mongo_url, {"tier": MEMORIES}))
            tier_port = stack.enter_context(role("tiered", "--redis-url", rurl, "--mongo-url", mongo_url))
            tok_tier, _ = write_agent(ctx, "tier", memory=memory_manifest("tiered", f"http://127.0.0.1:{tier_port}"))
        else:
            notes.append("memplane+tiered skipped: no Redis or no Mongo-wire server available")
        mp_port = stack.enter_context(role("memplane", "--upstream", upstream, "--context-root", str(ctx),
                                           "--history-root", str(hist)))
        mp = f"http://127.0.0.1:{mp_port}/v1/chat/completions"
        targets += [("memplane-off", mp, tok_off), ("memplane+reference", mp, tok_ref)]
        if tok_tier:
            targets.append(("memplane+tiered", mp, tok_tier))
        peer_rows, skipped = _peer_targets(stack, prov_port, tmp)
        targets += peer_rows
        for name, url, token in targets:
            for stream in (False, True):
                for conc in (1, 32):
                    key = f"{name}|{'stream' if stream else 'json'}|c{conc}"
                    n = requests if conc == 32 else requests // 4
                    rows[key] = load(url, token, conc, n, seconds, stream)
    out_rows = []
    for key, r in rows.items():
        name, mode, conc = key.split("|")
        direct = rows[f"direct|{mode}|{conc}"]
        floor = rows[f"passthrough|{mode}|{conc}"]
        out_rows.append([name, mode, conc, r["rps"], r["p50_ms"], r["p99_ms"], r["ttfb_p50_ms"], r["ttfb_p99_ms"],
                         r["p50_ms"] - direct["p50_ms"], r["rps"] / direct["rps"], r["rps"] / floor["rps"],
                         r["errors"]])
    print(table(["target", "mode", "conc", "req/s", "p50_ms", "p99_ms", "ttfb50", "ttfb99", "+p50_vs_direct",
                 "rps/direct", "rps/passthru", "errors"], out_rows))
    for name, reason in skipped.items():
        print(f"{name}: {reason}")
    for n in notes:
        print(n)
    ref32 = rows.get("memplane+reference|json|c32")
    summary = {}
    if ref32:
        c1 = rows["memplane+reference|json|c1"]
        summary = {
            "added_p50_c1_ms": round(c1["p50_ms"] - rows["direct|json|c1"]["p50_ms"], 3),
            "added_p99_c32_ms": round(ref32["p99_ms"] - rows["direct|json|c32"]["p99_ms"], 3),
            "rps_vs_passthrough_c32": round(ref32["rps"] / rows["passthrough|json|c32"]["rps"], 3),
            "ttfb_added_p50_ms": round(rows["memplane+reference|stream|c1"]["ttfb_p50_ms"]
                                       - rows["direct|stream|c1"]["ttfb_p50_ms"], 3),
        }
    engram = rows.get("engram-proxy+memory|json|c32")
    if ref32 and engram:
        summary["engram_added_p50_c1_ms"] = round(rows["engram-proxy+memory|json|c1"]["p50_ms"]
                                                  - rows["direct|json|c1"]["p50_ms"], 3)
        summary["rps_vs_engram_c32"] = round(ref32["rps"] / engram["rps"], 3) if engram["rps"] else None
        print(f"peer: engram-proxy (memory on, {MEMORIES} memories) adds p50 {summary['engram_added_p50_c1_ms']} ms "
              f"at c=1; memplane+reference serves {summary['rps_vs_engram_c32']}x its req/s at c=32")
    path = write_results("overhead", {"rows": rows, "summary": summary, "peers_skipped": skipped, "notes": notes})
    print(f"overhead: memplane+reference adds p50 {summary.get('added_p50_c1_ms')} ms at c=1, p99 "
          f"{summary.get('added_p99_c32_ms')} ms at c=32, throughput {summary.get('rps_vs_passthrough_c32')}x "
          f"the pass-through at c=32, stream TTFB +{summary.get('ttfb_added_p50_ms')} ms ({path.name})")
    return summary


if __name__ == "__main__":
    main()
