"""Proxy overhead: the same fake provider reached directly, through a minimal aiohttp
pass-through, and through memplane (memory off, reference adapter, tiered adapter), at
concurrency 1 and 32, non-streaming and streaming. Peers are rows too when they install.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
import tempfile
from pathlib import Path

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH

from . import peers
from .harness import PIDS, QUICK, cpu_seconds, load, mongo, redis_url, role, table, write_results
from .seed import seed_embedded, seed_reference, seed_tiered, turn_summaries

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


ALL_TARGETS = ("direct", "passthrough", "memplane-off", "memplane+reference", "memplane+embedded", "memplane+tiered",
               "memplane-redis-1w+reference", "memplane-redis-2w+reference", "peers")


def _options(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--targets", type=lambda v: v.split(","), default=list(ALL_TARGETS),
                   help="comma list of " + ", ".join(ALL_TARGETS) + " (direct and passthrough always run)")
    p.add_argument("--modes", type=lambda v: v.split(","), default=["json", "stream"])
    p.add_argument("--conc", type=lambda v: [int(c) for c in v.split(",")], default=[1, 32])
    p.add_argument("--repeat", type=int, default=1, help="rounds over every target, interleaved")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    opts = _options(argv)
    wanted = set(opts.targets) | {"direct", "passthrough"}
    requests = 300 if QUICK else 2000
    seconds = 8 if QUICK else 25
    tmp = Path(tempfile.mkdtemp(prefix="memplane-bench-"))
    rows: dict[str, dict] = {}
    rounds: list[dict[str, dict]] = []
    notes: list[str] = []
    skipped: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        prov_port = stack.enter_context(role("provider"))
        upstream = f"http://127.0.0.1:{prov_port}/v1"
        targets: list[tuple[str, str, str]] = [("direct", f"{upstream}/chat/completions", "bench")]
        serving: dict[str, list[int]] = {"direct": [prov_port]}  # whose CPU time a target's turns cost
        pt_port = stack.enter_context(role("passthrough", "--upstream", upstream))
        targets.append(("passthrough", f"http://127.0.0.1:{pt_port}/v1/chat/completions", "bench"))
        serving["passthrough"] = [prov_port, pt_port]
        adapter_port: dict[str, int] = {}
        ctx, hist = tmp / "ctx", tmp / "hist"
        tok_off, _ = write_agent(ctx, "off")
        tokens: dict[str, str] = {"memplane-off": tok_off}
        if wanted & {"memplane+reference", "memplane-redis-1w+reference", "memplane-redis-2w+reference"}:
            ref_port = stack.enter_context(role("reference", "--data-dir", str(tmp / "ref")))
            tokens["memplane+reference"], _ = write_agent(ctx, "ref", memory=memory_manifest(
                "reference", f"http://127.0.0.1:{ref_port}", retain_batch_path=RETAIN_BATCH_PATH))
            adapter_port["reference"] = ref_port
            seed_reference(tmp / "ref", "ref", MEMORIES)
        if "memplane+embedded" in wanted:
            asyncio.run(seed_embedded(tmp / "emb", {"emb": MEMORIES}, dim=384))
            emb_port = stack.enter_context(role("embedded", "--data-dir", str(tmp / "emb")))
            tokens["memplane+embedded"], _ = write_agent(ctx, "emb", memory=memory_manifest(
                "embedded", f"http://127.0.0.1:{emb_port}", retain_batch_path=RETAIN_BATCH_PATH))
            adapter_port["embedded"] = emb_port
        rurl = redis_url()
        mongo_url = stack.enter_context(mongo(tmp)) if "memplane+tiered" in wanted else None
        if rurl and mongo_url:
            asyncio.run(seed_tiered(mongo_url, {"tier": MEMORIES}))
            tier_port = stack.enter_context(role("tiered", "--redis-url", rurl, "--mongo-url", mongo_url))
            tokens["memplane+tiered"], _ = write_agent(ctx, "tier", memory=memory_manifest(
                "tiered", f"http://127.0.0.1:{tier_port}"))
            adapter_port["tiered"] = tier_port
        elif "memplane+tiered" in wanted:
            notes.append("memplane+tiered skipped: no Redis or no Mongo-wire server available")
        mp_port = stack.enter_context(role("memplane", "--upstream", upstream, "--context-root", str(ctx),
                                           "--history-root", str(hist)))
        mp = f"http://127.0.0.1:{mp_port}/v1/chat/completions"
        for name in ("memplane-off", "memplane+reference", "memplane+embedded", "memplane+tiered"):
            if name in wanted and name in tokens:
                targets.append((name, mp, tokens[name]))
                serving[name] = [prov_port, mp_port] + ([adapter_port[name.split("+")[1]]] if "+" in name else [])
        # the same proxy as one and as two worker processes, on the shared (Redis) ledger workers need
        for workers in (1, 2):
            name = f"memplane-redis-{workers}w+reference"
            if name not in wanted:
                continue
            if not rurl:
                notes.append(f"{name} skipped: no Redis")
                continue
            port = stack.enter_context(role("memplane", "--upstream", upstream, "--context-root", str(ctx),
                                            "--history-root", str(tmp / f"hist-{workers}w"), "--redis-url", rurl,
                                            "--ledger-prefix", f"bench{workers}w{os.getpid()}",
                                            "--workers", str(workers)))
            targets.append((name, f"http://127.0.0.1:{port}/v1/chat/completions", tokens["memplane+reference"]))
            serving[name] = [prov_port, port, adapter_port["reference"]]
        if "peers" in wanted:
            peer_rows, skipped = _peer_targets(stack, prov_port, tmp)
            targets += peer_rows
        for _ in range(opts.repeat):
            this: dict[str, dict] = {}
            for name, url, token in targets:
                for mode in opts.modes:
                    for conc in opts.conc:
                        n = requests if conc >= 32 else requests // 4
                        pids = [PIDS[p] for p in serving.get(name, [])]
                        before = cpu_seconds(pids)
                        row = load(url, token, conc, n, seconds, mode == "stream")
                        _settle(pids)  # work the turns left behind (retains, embeddings) counts too
                        row["cpu_us_per_turn"] = (round((cpu_seconds(pids) - before) / (row["requests"] + min(20, n)) * 1e6)
                                                  if pids and row["requests"] else None)
                        this[f"{name}|{mode}|c{conc}"] = row
            rounds.append(this)
        rows = rounds[-1]
    for i, r in enumerate(rounds):
        print(f"round {i + 1}: " + ", ".join(f"{k}={v}" for k, v in issue41_ratios(r).items()))
    out_rows = []
    for key, r in rows.items():
        name, mode, conc = key.split("|")
        direct = rows[f"direct|{mode}|{conc}"]
        floor = rows[f"passthrough|{mode}|{conc}"]
        out_rows.append([name, mode, conc, r["rps"], r["p50_ms"], r["p99_ms"], r["ttfb_p50_ms"], r["ttfb_p99_ms"],
                         r["p50_ms"] - direct["p50_ms"], r["rps"] / direct["rps"], r["rps"] / floor["rps"],
                         r["errors"], r.get("cpu_us_per_turn")])
    print(table(["target", "mode", "conc", "req/s", "p50_ms", "p99_ms", "ttfb50", "ttfb99", "+p50_vs_direct",
                 "rps/direct", "rps/passthru", "errors", "cpu_us/turn"], out_rows))
    for name, reason in skipped.items():
        print(f"{name}: {reason}")
    for n in notes:
        print(n)
    ref32 = rows.get("memplane+reference|json|c32")
    summary = {}
    if ref32 and "memplane+reference|json|c1" in rows and "memplane+reference|stream|c1" in rows:
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
    summary["issue41_rounds"] = [issue41_ratios(r) for r in rounds]
    path = write_results("overhead", {"rows": rows, "rounds": rounds, "summary": summary, "peers_skipped": skipped,
                                      "notes": notes})
    if summary.get("added_p50_c1_ms") is not None:
        print(f"overhead: memplane+reference adds p50 {summary.get('added_p50_c1_ms')} ms at c=1, p99 "
          f"{summary.get('added_p99_c32_ms')} ms at c=32, throughput {summary.get('rps_vs_passthrough_c32')}x "
          f"the pass-through at c=32, stream TTFB +{summary.get('ttfb_added_p50_ms')} ms ({path.name})")
    print(f"results: {path}")
    return summary


def _settle(pids: list[int], quiet: float = 0.05, most_s: float = 15.0) -> None:
    """Until the serving processes use under `quiet` of a core (the retain and embedding backlogs done)."""
    if not pids:
        return
    deadline = time.monotonic() + most_s
    last = cpu_seconds(pids)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_seconds(pids)
        if now - last < quiet * 0.5:
            return
        last = now


def issue41_ratios(r: dict[str, dict]) -> dict[str, float]:
    """Issue 41's targets from one round's rows (every ratio against rows of the same round)."""
    out: dict[str, float] = {}

    def get(name: str, mode: str, c: int) -> dict | None:
        return r.get(f"{name}|{mode}|c{c}")

    floor32, floor1, direct1 = get("passthrough", "json", 32), get("passthrough", "json", 1), get("direct", "json", 1)
    for name in ("memplane-off", "memplane+reference", "memplane+embedded", "memplane+tiered"):
        short = name.split("+")[-1] if "+" in name else "off"
        row32, row1 = get(name, "json", 32), get(name, "json", 1)
        if row32 and floor32:
            out[f"{short}_c32_rps_of_floor"] = round(row32["rps"] / floor32["rps"], 3)
            out[f"{short}_c32_p99_of_floor"] = round(row32["p99_ms"] / floor32["p99_ms"], 2)
        if row1 and direct1:
            out[f"{short}_c1_added_p50_ms"] = round(row1["p50_ms"] - direct1["p50_ms"], 3)
        if row1 and floor1:
            out[f"{short}_c1_above_floor_ms"] = round(row1["p50_ms"] - floor1["p50_ms"], 3)
        s1, ds1 = get(name, "stream", 1), get("direct", "stream", 1)
        if s1 and ds1 and row1 and direct1 and s1["ttfb_p50_ms"] is not None:
            ttfb_added = s1["ttfb_p50_ms"] - ds1["ttfb_p50_ms"]
            out[f"{short}_ttfb_added_minus_json_added_ms"] = round(ttfb_added - (row1["p50_ms"] - direct1["p50_ms"]), 3)
    for name in ("memplane-off", "memplane+reference", "memplane+embedded", "memplane+tiered"):
        short = name.split("+")[-1] if "+" in name else "off"
        row32 = get(name, "json", 32)
        if row32 and floor32 and row32.get("cpu_us_per_turn") and floor32.get("cpu_us_per_turn"):
            # when the machine is the bottleneck, throughput follows CPU per turn: a load-proof ratio
            out[f"{short}_c32_cpu_floor_over_target"] = round(floor32["cpu_us_per_turn"] / row32["cpu_us_per_turn"], 3)
            out[f"{short}_c32_cpu_us_per_turn"] = row32["cpu_us_per_turn"]
        row1, floor1c = get(name, "json", 1), get("passthrough", "json", 1)
        if row1 and floor1c and row1.get("cpu_us_per_turn") and floor1c.get("cpu_us_per_turn"):
            out[f"{short}_c1_cpu_us_above_floor"] = row1["cpu_us_per_turn"] - floor1c["cpu_us_per_turn"]
    if floor32 and floor32.get("cpu_us_per_turn"):
        out["floor_c32_cpu_us_per_turn"] = floor32["cpu_us_per_turn"]
    one, two = get("memplane-redis-1w+reference", "json", 32), get("memplane-redis-2w+reference", "json", 32)
    if one and two:
        out["workers2_over_1_c32"] = round(two["rps"] / one["rps"], 3)
    return out


if __name__ == "__main__":
    main()
