"""What retain costs: the response-path work (build the ledger entry, append it, hand it to
delivery) in microseconds, next to a bare executor hop measured in the same run; and sustained
retains per second into each adapter."""

from __future__ import annotations

import asyncio
import io
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from memory_adapters.reference.app import build_reference_app
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.context_store import ContextStore
from proxy.retain.delivery import RetainDelivery
from proxy.ledger.files import Ledger, build_entry
from memplane_cli.runner import Site, start_site

from .harness import QUICK, mongo, redis_url, table, write_results


def request_body(i: int) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "system", "content": "You are concise."},
                                            {"role": "user", "content": f"Note {i}: the launch moved to Thursday."}]}


async def response_path(n: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="memplane-retain-"))
    ledger = Ledger(tmp / "hist")
    tel = Telemetry(make_logger(io.StringIO()))
    async with aiohttp.ClientSession() as session:
        delivery = RetainDelivery(session, tel, Redactor(), ledger, ContextStore(tmp / "ctx", tel), max_buffered=n + 10)
        loop = asyncio.get_running_loop()
        response = {"format": "json", "json": {"choices": [{"message": {"content": "Noted, Thursday it is."}}]}}
        costs, hops = [], []
        for i in range(n):
            t0 = time.perf_counter()
            body = request_body(i)
            entry = build_entry(agent_id="a", path="/v1/chat/completions", requested_model="gpt-4o", provider="openai",
                                effective_model="gpt-4o", status_code=200, stream=False, request_original=body,
                                request_effective=body, response=response, usage={"prompt_tokens": 9, "completion_tokens": 5})
            start, end = await ledger.append("a", entry)
            delivery.submit("a", start, end, entry)
            costs.append((time.perf_counter() - t0) * 1e6)
            t0 = time.perf_counter()
            await loop.run_in_executor(ledger._executor, int)
            hops.append((time.perf_counter() - t0) * 1e6)
        for lane in delivery.lanes.values():
            lane.task.cancel()
        ledger.close()
    return {"p50_us": statistics.median(costs), "p99_us": sorted(costs)[int(len(costs) * 0.99)],
            "executor_hop_p50_us": statistics.median(hops)}


async def sustained(url: str, n: int, concurrency: int = 16, batch: int = 1) -> float:
    """Retains per second; with `batch` > 1, sent `batch` at a time to the batch endpoint."""
    def entry(i: int) -> dict:
        return {"id": f"hist1_{url[-12:]}{batch}_{i:048d}", "ts": "2026-11-20T10:00:00.000Z",
                "request_original": request_body(i),
                "response": {"format": "json", "json": {"choices": [{"message": {"content": "Noted."}}]}}}

    async with aiohttp.ClientSession() as s:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            if batch == 1:
                body, want = {"agent_id": "bench", "entry": entry(i)}, 202
            else:
                body = {"agent_id": "bench", "items": [{"entry": entry(j)} for j in range(i, min(n, i + batch))]}
                want = 200
            async with sem, s.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}) as r:
                assert r.status == want, await r.text()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(0, n, batch)))
        return n / (time.perf_counter() - t0)


async def main_async() -> dict:
    n = 1000 if QUICK else 5000
    path_cost = await response_path(n)
    tmp = Path(tempfile.mkdtemp(prefix="memplane-retain-"))
    rates = {}
    runner, port = await start_site(Site(build_reference_app(tmp / "ref", redactor=Redactor()), "127.0.0.1", 0))
    rates["reference"] = await sustained(f"http://127.0.0.1:{port}/retain", n // 2)
    rates["reference, batches of 32"] = await sustained(f"http://127.0.0.1:{port}{RETAIN_BATCH_PATH}", n // 2,
                                                        concurrency=4, batch=32)
    await runner.cleanup()
    rurl = redis_url()
    with mongo(tmp) as murl:
        if rurl and murl:
            from memory_adapters.tiered.app import build_tiered_app
            from memory_adapters.tiered.config import TieredSettings
            settings = TieredSettings.from_env(redis_url=rurl, mongo_url=murl, ltm_max_entries=0)
            runner, port = await start_site(Site(build_tiered_app(settings, Telemetry(make_logger(io.StringIO())), Redactor()),
                                                 "127.0.0.1", 0))
            rates["tiered"] = await sustained(f"http://127.0.0.1:{port}/retain", n // 5)
            await runner.cleanup()
    print(table(["measure", "value"], [
        ["response path: entry + ledger append + submit, p50 (us)", path_cost["p50_us"]],
        ["response path p99 (us)", path_cost["p99_us"]],
        ["baseline: one bare hop to the ledger thread, p50 (us)", path_cost["executor_hop_p50_us"]],
        *[[f"sustained retains/s into {k}", v] for k, v in rates.items()]]))
    doc = {"response_path": path_cost, "retains_per_s": rates}
    out = write_results("retain", doc)
    print(f"retain: response-path cost p50 {path_cost['p50_us']:.0f} us (bare thread hop "
          f"{path_cost['executor_hop_p50_us']:.0f} us); "
          + ", ".join(f"{k} {v:.0f} retains/s" for k, v in rates.items()) + f" ({out.name})")
    return doc


def main() -> dict:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
