"""Memory and latency under hostile request bodies (issue 20, point 1): RSS before, during, after.

Starts the simulator and ``gatewayd serve`` (SQLite, default settings unless given) and
runs three attacks over loopback, printing the daemon's RSS (``/proc/<pid>/status``
VmRSS) before each, while it runs, and ``--settle`` seconds after its sockets closed:

  1. no key: ``--connections`` connections each declaring ``--mb`` MB and sending all
     but the last byte as fast as the daemon takes them (the issue's 84 -> 472 MiB);
  2. no key, trickled: ``--trickle`` connections sending a body byte every 2 s; how many
     the daemon still holds open after 5 s (the issue's: all of 200 after 100 s);
  3. a valid key of an account that never paid (its models are hidden: every request is
     refused, after the body is read and parsed): ``--connections`` clients each sending
     ``--mb`` MB JSON bodies back to back for ``--seconds``; answers by status, and
     ``/healthz`` latency meanwhile (the issue's: 4 ms -> 860 ms).

    .venv/bin/python bench/attack_bodies.py [--mb 100] [--connections 4] [--trickle 200]
                                            [--seconds 10] [--settle 5] [--server 'key = value']

Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import collections
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live import Daemon, Sim, unique_email  # noqa: E402

MIB = 1 << 20


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def open_sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if fd.readlink().name.startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def head(path: str, length: int, secret: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {secret}\r\n" if secret else ""
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {length}\r\n\r\n").encode()


def push(sock: socket.socket, total: int, stop_at: float, counter: list) -> None:
    chunk = b"x" * (256 * 1024)
    sent = 0
    try:
        while sent < total and time.monotonic() < stop_at:
            part = chunk[:total - sent]
            sock.sendall(part)
            sent += len(part)
    except OSError:
        pass
    counter.append(sent)


def phase(name: str, pid: int, before: float, during: float, settle_s: float) -> None:
    time.sleep(settle_s)
    after = rss_mib(pid)
    print(f"  RSS MiB: before {before:.0f}, during {during:.0f}, {settle_s:g} s after {after:.0f}"
          f"  (+{during - before:.0f} / +{after - before:.0f})")


def attack_one_short(url: str, pid: int, n: int, mb: int, settle_s: float) -> None:
    print(f"1. no key: {n} connections, {mb} MB declared, all but one byte sent")
    before = rss_mib(pid)
    socks, sent, threads = [], [], []
    stop_at = time.monotonic() + 20
    for _ in range(n):
        sock = connect(url)
        sock.sendall(head("/v1/chat/completions", mb * MIB))
        thread = threading.Thread(target=push, args=(sock, mb * MIB - 1, stop_at, sent), daemon=True)
        thread.start()
        socks.append(sock)
        threads.append(thread)
    answers = collections.Counter()
    for sock in socks:
        sock.settimeout(10)
        try:
            answers[sock.recv(64)[:12].decode("latin-1", "replace")] += 1
        except OSError as e:
            answers[type(e).__name__] += 1
    during = rss_mib(pid)
    for thread in threads:
        thread.join(25)
    for sock in socks:
        sock.close()
    print(f"  answers: {dict(answers)}; body bytes the client got out before the close: "
          f"{', '.join(f'{s / MIB:.1f} MB' for s in sent)}")
    phase("one-short", pid, before, during, settle_s)


def attack_trickle(url: str, pid: int, n: int, settle_s: float) -> None:
    print(f"2. no key: {n} connections, one body byte every 2 s")
    before = rss_mib(pid)
    base_sockets = open_sockets(pid)
    socks = []
    for i in range(n):
        sock = connect(url)
        sock.sendall(head("/v1/messages" if i % 2 else "/v1/chat/completions", 10 * MIB))
        socks.append(sock)
    for _ in range(3):  # 5 s: a byte at 0, 2 and 4 s
        for sock in socks:
            try:
                sock.send(b"x")
            except OSError:
                pass
        time.sleep(2 if _ < 2 else 1)
    held = open_sockets(pid) - base_sockets
    during = rss_mib(pid)
    answered = 0
    for sock in socks:
        sock.settimeout(0.2)
        try:
            if sock.recv(16).startswith(b"HTTP/1.1 401"):
                answered += 1
        except OSError:
            pass
        sock.close()
    print(f"  after 5 s: {held} of {n} connections still open in the daemon; {answered} answered 401")
    phase("trickle", pid, before, during, settle_s)


def attack_unpaid_key(url: str, pid: int, secret: str, n: int, mb: int, seconds: float, settle_s: float) -> None:
    print(f"3. a key of an account that never paid: {n} clients sending {mb} MB JSON bodies for {seconds:g} s")
    body = b'{"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "' + b"a" * (mb * MIB - 80) + b'"}]}'
    before = rss_mib(pid)
    stop_at = time.monotonic() + seconds
    statuses: collections.Counter = collections.Counter()
    peak = [before]
    health: list[float] = []

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            while time.monotonic() < stop_at:
                try:
                    answer = http.post(url + "/v1/chat/completions", content=body,
                                       headers={"authorization": f"Bearer {secret}", "content-type": "application/json"})
                    code = answer.json().get("error", {}).get("code") if answer.status_code != 200 else ""
                    statuses[f"{answer.status_code} {code}".strip()] += 1
                except httpx.HTTPError as e:
                    statuses[type(e).__name__] += 1

    def probe() -> None:
        with httpx.Client(timeout=30) as http:
            while time.monotonic() < stop_at:
                began = time.perf_counter()
                http.get(url + "/healthz")
                health.append((time.perf_counter() - began) * 1000)
                peak[0] = max(peak[0], rss_mib(pid))
                time.sleep(0.05)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(n)]
    threads.append(threading.Thread(target=probe, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    print(f"  answers: {dict(statuses)}")
    if health:
        print(f"  /healthz during: p50 {statistics.median(health):.1f} ms, max {max(health):.1f} ms ({len(health)} probes)")
    phase("unpaid", pid, before, peak[0], settle_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--trickle", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--settle", type=float, default=5)
    parser.add_argument("--server", action="append", default=[], help="extra [server] lines, e.g. 'h2c = true'")
    args = parser.parse_args()
    sim = Sim()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            daemon = Daemon(Path(tmp), sim.url, server="\n".join(args.server))
            try:
                pid = daemon.proc.pid
                account = daemon.admin.account(unique_email("attack"), paid_usd=None)
                secret = daemon.admin.key(account["id"])["secret"]
                with httpx.Client() as http:  # warm: the first requests load what every request needs
                    for _ in range(20):
                        http.get(daemon.url + "/healthz")
                time.sleep(1)
                print(f"gatewayd pid {pid}, idle RSS {rss_mib(pid):.0f} MiB")
                attack_one_short(daemon.url, pid, args.connections, args.mb, args.settle)
                attack_trickle(daemon.url, pid, args.trickle, args.settle)
                attack_unpaid_key(daemon.url, pid, secret, args.connections, args.mb, args.seconds, args.settle)
                print(f"end: RSS {rss_mib(pid):.0f} MiB")
            finally:
                daemon.stop()
    finally:
        sim.stop()


if __name__ == "__main__":
    main()
