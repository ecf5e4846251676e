"""Soak: minutes of mixed traffic with random client disconnects and upstream faults.

Starts its own simulator and ``gatewayd serve`` (a temporary data dir), then runs
``--concurrency`` clients for ``--seconds`` against every public endpoint, streaming and
not, with a ``[[sim:fault=...]]`` marker on a share of the requests and clients that hang
up mid-answer. At the end it prints the requests served, the faults injected, the money
audit (``gatewayctl audit --json``) and the daemon's RSS at start, after warm-up and at
the end. A benchmark that prints figures, not a test. Usage:

    .venv/bin/python bench/soak.py [--seconds 180 | --requests 200000] [--concurrency 16] [--seed 1]

``bench/hot_path.py`` runs it too (``--soak-requests``) for the memory drift figure: RSS
from the end of warm-up (the first tenth of the requests) to the end.

Exit status 1 when the audit is not ok, a hold is left, or the gateway answered a 500.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live import BIN, Daemon, Sim, unique_email  # noqa: E402

# (weight, marker or None). Stall faults end at the idle timeout the soak daemon is given.
FAULTS = [
    (55, None),
    (5, "[[sim:fault=stall_after:3]]"),
    (5, "[[sim:fault=error_after:4]]"),
    (5, "[[sim:fault=drop_after:4]]"),
    (4, "[[sim:fault=status:429]]"),
    (3, "[[sim:fault=status:500]]"),
    (3, "[[sim:fault=status:503]]"),
    (4, "[[sim:fault=invalid_json]]"),
    (4, "[[sim:fault=disconnect]]"),
    (5, "[[sim:fault=no_usage]]"),
    (4, "[[sim:fault=delay_ms:300]]"),
    (3, "[[sim:fault=chunk_delay_ms:20]]"),
]
CLIENT_HANGUP_SHARE = 0.12
LIMITED_KEY_SHARE = 0.05  # requests sent with a key whose small spend limit runs out (403s)
IDLE_TIMEOUT_S = 2


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pick_fault(rng: random.Random) -> str | None:
    total = sum(w for w, _ in FAULTS)
    x = rng.uniform(0, total)
    for weight, marker in FAULTS:
        x -= weight
        if x <= 0:
            return marker
    return None


def make_request(rng: random.Random, marker: str | None, n: int) -> tuple[str, dict, bool]:
    """(path, body, stream) for one random request."""
    words = rng.choice([5, 20, 60])
    text = f"soak {n} [[sim:words={words}]] {marker or ''}"
    stream = rng.random() < 0.6
    kind = rng.choice(["chat", "chat", "messages", "chat-claude", "responses", "responses-claude", "embeddings"])
    if kind == "chat":
        return "/v1/chat/completions", {"model": "gpt-4.1-mini", "stream": stream, "max_tokens": 200,
                                        "messages": [{"role": "user", "content": text}]}, stream
    if kind == "chat-claude":
        return "/v1/chat/completions", {"model": "claude-haiku-4-5", "stream": stream, "max_tokens": 200,
                                        "messages": [{"role": "user", "content": text}]}, stream
    if kind == "messages":
        return "/v1/messages", {"model": "claude-haiku-4-5", "stream": stream, "max_tokens": 200,
                                "messages": [{"role": "user", "content": text}]}, stream
    if kind == "responses":
        return "/v1/responses", {"model": "gpt-4.1-mini", "stream": stream, "input": text}, stream
    if kind == "responses-claude":
        return "/v1/responses", {"model": "claude-haiku-4-5", "stream": stream, "input": text,
                                 "max_output_tokens": 200}, stream
    return "/v1/embeddings", {"model": "text-embedding-3-small", "input": [text, "second input"]}, False


class Tally:
    def __init__(self) -> None:
        self.requests = 0
        self.statuses: collections.Counter = collections.Counter()
        self.faults: collections.Counter = collections.Counter()
        self.hangups = 0
        self.transport_errors: collections.Counter = collections.Counter()
        self.gateway_500s: list[str] = []


async def client_loop(url: str, secrets: list[str], limited: list[str], rng: random.Random, deadline: float,
                      tally: Tally, requests: int | None = None) -> None:
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(30), limits=limits) as http:
        while trio.current_time() < deadline and (requests is None or tally.requests < requests):
            tally.requests += 1
            n = tally.requests
            marker = pick_fault(rng)
            if marker:
                tally.faults[marker.split("=", 1)[1].rstrip("]").split(":")[0]] += 1
            path, body, stream = make_request(rng, marker, n)
            hang_up = rng.random() < CLIENT_HANGUP_SHARE
            secret = rng.choice(limited if rng.random() < LIMITED_KEY_SHARE else secrets)
            headers = {"authorization": f"Bearer {secret}", "anthropic-version": "2023-06-01"}
            try:
                if hang_up and not stream:
                    with trio.move_on_after(rng.uniform(0.001, 0.05)):
                        await http.post(path, json=body, headers=headers)
                    tally.hangups += 1
                    continue
                async with http.stream("POST", path, json=body, headers=headers) as response:
                    tally.statuses[response.status_code] += 1
                    seen = 0
                    async for chunk in response.aiter_raw():
                        seen += chunk.count(b"\n\n")
                        if hang_up and seen >= 2:
                            tally.hangups += 1
                            break
                    if response.status_code == 500 and marker != "[[sim:fault=status:500]]":
                        tally.gateway_500s.append(f"{path} {json.dumps(body)[:120]}")
            except httpx.HTTPError as e:
                tally.transport_errors[type(e).__name__] += 1


def usage_statuses(db: Path) -> collections.Counter:
    """Usage rows by status, read straight from the daemon's SQLite file (WAL: a reader never blocks it)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return collections.Counter(dict(conn.execute("SELECT status, count(*) FROM usage GROUP BY status")))
    finally:
        conn.close()


def audit(socket_path: str) -> tuple[int, dict]:
    done = subprocess.run([str(BIN / "gatewayctl"), "audit", "--json", "--socket", socket_path],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout or "{}")


def soak(*, seconds: float, requests: int | None, concurrency: int = 16, accounts: int = 4, seed: int = 1,
         pin_daemon: set[int] | None = None) -> dict:
    """Run a soak; returns its figures (see ``report``). Stops at ``requests`` sent when given,
    else after ``seconds``."""
    sim = Sim()
    workdir = Path(tempfile.mkdtemp(prefix="gatewayd-soak-"))
    daemon = Daemon(workdir, sim.url, server=f"stream_idle_timeout_s = {IDLE_TIMEOUT_S}\nshutdown_grace_s = 5\n")
    try:
        if pin_daemon:
            pin(daemon.proc.pid, pin_daemon)
        secrets, limited, account_ids = [], [], []
        for _ in range(accounts):
            account = daemon.admin.account(unique_email("soak"), paid_usd="1000000")
            daemon.admin.call("PUT", f"/accounts/{account['id']}/embeddings/text-embedding-3-small",
                              {"enabled": True})
            account_ids.append(account["id"])
            secrets.append(daemon.admin.key(account["id"], name="soak")["secret"])
            # a second key per account with a small spend limit: it runs out during the soak
            limited.append(daemon.admin.key(account["id"], name="limited", spend_limit_nano=20_000_000)["secret"])
        pid = daemon.proc.pid
        rss_start = rss_kib(pid)
        tally = Tally()
        started = time.monotonic()
        samples: list[tuple[int, int]] = []  # (requests sent, RSS KiB)

        async def run() -> None:
            deadline = trio.current_time() + (seconds if requests is None else 10 ** 9)
            async with trio.open_nursery() as nursery:
                for i in range(concurrency):
                    nursery.start_soon(client_loop, daemon.url, secrets, limited, random.Random(seed * 1000 + i),
                                       deadline, tally, requests)
                while nursery.child_tasks:
                    await trio.sleep(1)
                    samples.append((tally.requests, rss_kib(pid)))

        trio.run(run)
        elapsed = time.monotonic() - started
        time.sleep(IDLE_TIMEOUT_S + 1)  # let cut streams settle
        rss_end = rss_kib(pid)
        code, report = audit(daemon.socket)
        held = sum(daemon.admin.balance(a)["held_nano"] for a in account_ids)
        rows = usage_statuses(workdir / "data" / "gateway.db")
        # drift: from the end of warm-up (the first tenth of the requests) to the end
        sent = tally.requests
        warm = next((rss for n, rss in samples if n >= sent / 10), rss_end)
        return {
            "elapsed": elapsed, "concurrency": concurrency, "seed": seed, "tally": tally, "rows": rows,
            "audit_code": code, "audit": report, "held": held, "rss_start": rss_start, "rss_warm": warm,
            "rss_end": rss_end, "rss_max": max([rss for _, rss in samples] + [rss_end]),
            "drift": (rss_end - warm) / warm if warm else 0.0,
            "curve": [next((rss for n, rss in samples if n >= sent * k / 10), rss_end) for k in range(1, 11)],
        }
    finally:
        daemon.stop()
        sim.stop()


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` onto ``cpus`` (threads started later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, OSError):
            pass


def print_report(r: dict) -> bool:
    """Print a soak's figures; True when it passed (audit ok, no hold left, no gateway 500)."""
    tally, rows, report = r["tally"], r["rows"], r["audit"]
    elapsed = r["elapsed"]
    print(f"soak: {elapsed:.0f} s, {r['concurrency']} clients, seed {r['seed']}")
    print(f"requests sent: {tally.requests}  ({tally.requests / elapsed:.0f}/s); "
          f"answered: {sum(tally.statuses.values())}; usage rows written: {sum(rows.values())}")
    print("usage rows by status: " + ", ".join(f"{k}: {v}" for k, v in rows.most_common()))
    print("statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(tally.statuses.items())))
    print(f"faults injected: {sum(tally.faults.values())} (" +
          ", ".join(f"{k}: {v}" for k, v in sorted(tally.faults.items())) + ")")
    print(f"client hang-ups: {tally.hangups}; client-side transport errors: "
          + (", ".join(f"{k}: {v}" for k, v in tally.transport_errors.items()) or "none"))
    print(f"gateway 500s on fault-free requests: {len(tally.gateway_500s)}")
    for line in tally.gateway_500s[:5]:
        print("   ", line)
    print(f"audit: {'ok' if report.get('ok') else 'NOT OK'} (gatewayctl exit {r['audit_code']}); "
          f"held after: {r['held']} nano")
    print(f"daemon RSS: start {r['rss_start'] / 1024:.1f} MiB, after warm-up (first tenth of the requests) "
          f"{r['rss_warm'] / 1024:.1f} MiB, end {r['rss_end'] / 1024:.1f} MiB, max {r['rss_max'] / 1024:.1f} MiB; "
          f"drift after warm-up {r['drift'] * 100:+.1f}%")
    print("daemon RSS at each tenth of the requests (MiB): " + " ".join(f"{kib / 1024:.0f}" for kib in r["curve"]))
    if not report.get("ok"):
        print(json.dumps(report, indent=1)[:3000])
    return r["audit_code"] == 0 and r["held"] == 0 and not tally.gateway_500s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--requests", type=int, default=None, help="stop after this many requests (not --seconds)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = soak(seconds=args.seconds, requests=args.requests, concurrency=args.concurrency,
                  accounts=args.accounts, seed=args.seed)
    return 0 if print_report(result) else 1


if __name__ == "__main__":
    sys.exit(main())
