"""Hot-path benchmark: the same requests straight to the simulator and through gatewayd.

Prints, for non-streaming and streaming chat completions:
  - latency p50 / p99 at a fixed request rate (default 100 req/s), direct and through the
    gateway, and the difference (the latency the gateway adds);
  - requests/second at a fixed concurrency, direct and through the gateway;
  - the gateway process's CPU time per request (user + system, from /proc), with auth,
    holds and the usage row on.
It is a benchmark that prints figures, not a test. Usage:

    .venv/bin/python bench/hot_path.py [--rate 100] [--seconds 10] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live import Daemon, Sim  # noqa: E402

BODY = b'{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"Say hello to the benchmark"}],"max_tokens":64}'
STREAM_BODY = BODY[:-1] + b',"stream":true}'


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def one(client: httpx.AsyncClient, url: str, body: bytes, headers: dict, stream: bool) -> float:
    start = time.perf_counter()
    if stream:
        async with client.stream("POST", url, content=body, headers=headers) as r:
            async for _ in r.aiter_raw():
                pass
            assert r.status_code == 200, r.status_code
    else:
        r = await client.post(url, content=body, headers=headers)
        assert r.status_code == 200, r.text
    return time.perf_counter() - start


async def at_rate(url: str, body: bytes, headers: dict, stream: bool, rate: float, seconds: float) -> list[float]:
    latencies: list[float] = []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=200), timeout=30) as client:
        for _ in range(20):  # warm the pools
            await one(client, url, body, headers, stream)
        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            total = int(rate * seconds)

            async def record():
                latencies.append(await one(client, url, body, headers, stream))

            for i in range(total):
                await trio.sleep_until(start + i / rate)
                nursery.start_soon(record)
    return latencies


async def throughput(url: str, body: bytes, headers: dict, stream: bool, concurrency: int, seconds: float) -> float:
    done = 0
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency), timeout=30) as client:
        deadline = trio.current_time() + seconds

        async def worker():
            nonlocal done
            while trio.current_time() < deadline:
                await one(client, url, body, headers, stream)
                done += 1

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
    return done / seconds


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    sim = Sim()
    workdir = Path(tempfile.mkdtemp(prefix="gatewayd-bench-"))
    daemon = Daemon(workdir, sim.url)
    try:
        account = daemon.admin.account("bench@example.com", paid_usd="100000")
        secret = daemon.admin.key(account["id"], name="bench")["secret"]
        gateway_headers = {"authorization": f"Bearer {secret}", "content-type": "application/json"}
        direct_headers = {"authorization": "Bearer sim", "content-type": "application/json"}
        direct = sim.url + "/v1/chat/completions"
        through = daemon.url + "/v1/chat/completions"
        pid = daemon.proc.pid
        print(f"gatewayd bench: rate {args.rate:g} req/s for {args.seconds:g} s; throughput at concurrency "
              f"{args.concurrency}; CPU {os.cpu_count()} cores; gateway RSS at start {rss_mb(pid):.1f} MB")
        for name, body, stream in (("non-streaming", BODY, False), ("streaming", STREAM_BODY, True)):
            sim_cpu_before = cpu_seconds(sim.proc.pid)
            d = trio.run(at_rate, direct, body, direct_headers, stream, args.rate, args.seconds)
            sim_cpu_ms = (cpu_seconds(sim.proc.pid) - sim_cpu_before) / (len(d) + 20) * 1000
            cpu_before = cpu_seconds(pid)
            g = trio.run(at_rate, through, body, gateway_headers, stream, args.rate, args.seconds)
            cpu_per_request_ms = (cpu_seconds(pid) - cpu_before) / (len(g) + 20) * 1000
            print(f"\n{name}")
            print(f"  latency direct    p50 {pct(d, .5):7.2f} ms   p99 {pct(d, .99):7.2f} ms   (n={len(d)})")
            print(f"  latency gateway   p50 {pct(g, .5):7.2f} ms   p99 {pct(g, .99):7.2f} ms   (n={len(g)})")
            print(f"  added by gateway  p50 {pct(g, .5) - pct(d, .5):7.2f} ms   "
                  f"p99 {pct(g, .99) - pct(d, .99):7.2f} ms   mean {statistics.mean(g) * 1000 - statistics.mean(d) * 1000:.2f} ms")
            print(f"  gateway CPU per request {cpu_per_request_ms:.3f} ms (user+sys of the gatewayd process); "
                  f"for scale, the simulator (a quart-trio server with no upstream) spends {sim_cpu_ms:.3f} ms")
            rd = trio.run(throughput, direct, body, direct_headers, stream, args.concurrency, args.seconds / 2)
            rg = trio.run(throughput, through, body, gateway_headers, stream, args.concurrency, args.seconds / 2)
            print(f"  throughput direct {rd:8.0f} req/s   gateway {rg:8.0f} req/s  (client, simulator and gateway "
                  f"share the machine's cores)")
        audit = daemon.admin.audit()
        print(f"\naudit ok: {audit['ok']}; gateway RSS at end {rss_mb(pid):.1f} MB")
    finally:
        daemon.stop()
        sim.stop()


if __name__ == "__main__":
    main()
