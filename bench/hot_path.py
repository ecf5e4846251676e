"""Hot-path benchmark (`make bench`): every figure of issue 15, each beside the machine's floor.

One run starts the simulator (for canned answers, memory and the soak), a zero-latency
nginx upstream serving the simulator's answers (``bench/upstreams.py``), and ``gatewayd
serve`` pointed at nginx (SQLite, auth, holds and usage rows on). It prints, for the
pass-through route (chat -> an OpenAI-protocol model) and the translated route (chat ->
a Claude model, the Anthropic protocol upstream):

  - CPU per request and requests/s at 1, 16 and 64 connections (closed loop), p50 / p99;
  - CPU per request for 1, 100, 400 and 1,600 KB bodies, the cost per KB, and the longest
    single task step the gateway's event loop ran (``GATEWAYD_SLOW_STEP_MS``);
  - added latency at a paced 100 req/s, p50 / p99;
  - streams/s and added time to first byte at 16 connections (34 events a stream);
  - memory: idle RSS, RSS with 1,000 open streams (through the simulator) and the cost per
    stream, and RSS drift over a mixed soak with faults (``bench/soak.py``).

"floor" is the same traffic straight to nginx (its CPU per request, its latency), in
the same run; "added" is gateway minus floor. Daemon CPU is user+system time from
/proc/<pid>/stat over the window. The gateway is pinned to core 0; the load generator
(``bench/loadgen.py``, raw asyncio, tens of microseconds a request), nginx and the
simulator to core 1, so the generator never shares the gateway's core. Each window runs
``--repeat`` times and the median is printed: the machine is shared, read ratios.

    .venv/bin/python bench/hot_path.py [--seconds 2] [--repeat 3] [--soak-requests 10000]
                                       [--open-streams 1000] [--write-readme]
    .venv/bin/python bench/hot_path.py --only workers [--workers 1,2] [--databases sqlite,postgres]

The ``workers`` section (not in the default run) starts ``gatewayd serve --workers N`` for each
N and database (PostgreSQL: a fresh database on 127.0.0.1:5432, dropped after; SQLite serves
one process, so only N = 1) and prints requests/s and CPU per request at 64 connections, the
CPU summed over the supervisor, every worker and (PostgreSQL) the database's backends.
Those daemons are not pinned: N workers are there to use every core.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen  # noqa: E402
from soak import pin, print_report, soak  # noqa: E402
from tests.live import Daemon, Sim  # noqa: E402
from upstreams import Nginx, capture  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# issue 15's measurement of LiteLLM 1.106.2 (one worker), used when no --litellm is given
LITELLM_ISSUE_15 = {"cpu_1": 19.0, "cpu_64": 14.7, "streams_16": 22.0, "source": "issue 15's figures, not this run"}
GATEWAY_CORE, BENCH_CORE = {0}, {1}
MEMORY_ACCOUNTS = 16  # the open streams' accounts: each within its fair share of the upstream pool


def cpu_seconds(*pids: int) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime, all threads
    return total / ticks


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``--workers N``: the master and its workers)."""
    pids = [pid]
    for p in pids:
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except FileNotFoundError:
            continue
        pids += [int(c) for c in children]
    return pids


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def pad_to(body: dict, size: int, text_of) -> bytes:
    """``body`` with its prompt padded so the encoded request is ``size`` bytes."""
    raw = orjson.dumps(body)
    filler = "lorem ipsum dolor sit amet consectetur " * (size // 39 + 1)
    text_of(body, text_of(body) + " " + filler[: max(0, size - len(raw) - 1)])
    return orjson.dumps(body)


def chat_body(model: str, size: int, stream: bool = False) -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello to the benchmark"}],
            "max_tokens": 64}
    if stream:
        body["stream"] = True

    def text_of(b, value=None):
        if value is None:
            return b["messages"][0]["content"]
        b["messages"][0]["content"] = value

    return pad_to(body, size, text_of)


class Window:
    """One measured window: the load generator's result and the CPU the servers spent."""

    def __init__(self, result: loadgen.Result, cpu_s: float) -> None:
        self.result = result
        self.cpu_ms = cpu_s / max(1, result.done) * 1000
        self.rps = result.done / result.elapsed if result.elapsed else 0.0


class Target:
    """Where a request goes: host, port, path, headers, and the pids whose CPU it costs."""

    def __init__(self, url: str, path: str, headers: dict[str, str], pids) -> None:
        hostport = url.split("//", 1)[1]
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.path = path
        self.headers = headers
        self.pids = pids

    def raw(self, body: bytes) -> bytes:
        return loadgen.build_request(self.path, body, {"Content-Type": "application/json", **self.headers},
                                     f"{self.host}:{self.port}")

    def measure(self, run) -> Window:
        pids = self.pids()
        before = cpu_seconds(*pids)
        result = run()
        window = Window(result, cpu_seconds(*pids) - before)
        if result.errors:
            print(f"    !! {self.path}: answers other than 200: {result.errors}")
        return window


def family(pid: int) -> list[int]:
    """A daemon and its children (the workers of ``serve --workers N``)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return [pid, *children]


def backends(database: str) -> list[int]:
    """The PostgreSQL server processes serving ``database`` (same machine)."""
    import psycopg

    from tests import pg

    with psycopg.connect(pg.ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()
    return [r[0] for r in rows if Path(f"/proc/{r[0]}").exists()]


def workers_section(args, upstream_url: str, workdir: Path, figures: dict) -> None:
    print("\n== serve --workers N: requests/s and CPU per request, pass-through 1 KB, 64 connections ==")
    print(f"{'database':10} {'workers':>7} | {'req/s':>7} {'gw CPU ms':>9} {'db CPU ms':>9} {'p50':>7} {'p99':>7}")
    body = chat_body("gpt-4.1-mini", 1024)
    for database in args.databases.split(","):
        for n in (int(w) for w in args.workers.split(",")):
            if database == "sqlite" and n > 1:
                print(f"{database:10} {n:7} | refused: a SQLite database is served by one process")
                continue
            env, name = {}, None
            if database == "postgres":
                from tests import pg

                name, url = pg.create_database()
                env["GATEWAY_DATABASE_URL"] = url
            daemon = Daemon(workdir / f"workers-{database}-{n}", upstream_url, args=["--workers", str(n)], env=env)
            try:
                account = daemon.admin.account("bench@example.com", paid_usd="100000000")
                secret = daemon.admin.key(account["id"], name="bench")["secret"]
                db_pids = (lambda: backends(name)) if name else (lambda: [])
                t = Target(daemon.url, "/v1/chat/completions", {"Authorization": f"Bearer {secret}"},
                           lambda: family(daemon.proc.pid))
                loadgen.closed_loop(t.host, t.port, t.raw(body), 16, 1.0)  # warm every worker's pools
                windows = []
                for _ in range(args.repeat):
                    pids = db_pids()
                    db_before = cpu_seconds(*pids)
                    windows.append(t.measure(lambda: loadgen.closed_loop(t.host, t.port, t.raw(body), 64,
                                                                         args.seconds)))
                    windows[-1].db_ms = (cpu_seconds(*pids) - db_before) / max(1, windows[-1].result.done) * 1000
                w = median_window(windows)
                db_ms = statistics.median(x.db_ms for x in windows)
                figures[("workers", database, n)] = {**w, "db_ms": db_ms}
                print(f"{database:10} {n:7} | {w['rps']:7.0f} {w['cpu_ms']:9.3f} {db_ms:9.3f} {w['p50']:7.2f} "
                      f"{w['p99']:7.2f}")
            finally:
                daemon.stop()
                if name:
                    pg.drop_database(name)


def peer_section(args, upstream_url: str, workdir: Path, pinned: bool) -> dict:
    """LiteLLM's CPU per request at 1 and 64 connections and its streams/s at 16, same upstream."""
    from litellm_peer import LiteLLM

    print("\n== the peer: LiteLLM proxy, one worker, pinned like the gateway, same nginx upstream ==")
    peer = LiteLLM(args.litellm, workdir / "litellm", upstream_url)
    try:
        if pinned:
            for pid in peer.pids:
                pin(pid, GATEWAY_CORE)
        t = Target(peer.url, "/v1/chat/completions", peer.headers, lambda: peer.pids)
        body, stream_body = chat_body("gpt-4.1-mini", 1024), chat_body("gpt-4.1-mini", 1024, stream=True)
        loadgen.closed_loop(t.host, t.port, t.raw(body), 4, 2.0)  # warm up (its first requests are slow)
        figures = {"source": "measured in this run"}
        for conns in (1, 64):
            w = median_window([t.measure(lambda: loadgen.closed_loop(t.host, t.port, t.raw(body), conns,
                                                                     args.seconds * 2)) for _ in range(args.repeat)])
            figures[f"cpu_{conns}"] = w["cpu_ms"]
            figures[f"rps_{conns}"] = w["rps"]
            print(f"LiteLLM        {conns:5} conns | CPU {w['cpu_ms']:.2f} ms/request, {w['rps']:.0f} req/s, "
                  f"p50 {w['p50']:.1f} p99 {w['p99']:.1f} ms")
        ts = Target(peer.url, "/v1/chat/completions", {**peer.headers, "Accept": "text/event-stream"}, lambda: peer.pids)
        w = median_window([ts.measure(lambda: loadgen.closed_loop(ts.host, ts.port, ts.raw(stream_body), 16,
                                                                  args.seconds * 2)) for _ in range(args.repeat)])
        figures["streams_16"] = w["rps"]
        figures["ttfb50_16"] = w["ttfb50"]
        print(f"LiteLLM           16 streams | {w['rps']:.0f} streams/s, CPU {w['cpu_ms']:.2f} ms/stream, "
              f"TTFB p50 {w['ttfb50']:.1f} ms")
        return figures
    finally:
        peer.stop()


TRACING = """
[telemetry]
otlp_endpoint = "{url}"
sample_ratio = 1.0
metrics_interval_s = 5
"""


def tracing_section(args, upstream_url: str, workdir: Path, routes: dict, gateway, pinned: bool,
                    figures: dict) -> None:
    """CPU per request with OpenTelemetry tracing on at ratio 1.0 (and its metrics), exporting
    over OTLP/HTTP to a real receiver in this process (tests/otlp_receiver.py, on the bench's
    core), beside the same requests to the daemon without telemetry, in the same run."""
    from tests.otlp_receiver import HttpReceiver

    receiver = HttpReceiver(keep=False)  # counts spans: decoding them all would load the generator's process
    traced = Daemon(workdir / "gw-traced", upstream_url, extra=TRACING.format(url=receiver.url))
    try:
        if pinned:
            pin(traced.proc.pid, GATEWAY_CORE)
        account = traced.admin.account("bench@example.com", paid_usd="100000000")
        secret = traced.admin.key(account["id"], name="bench")["secret"]
        traced_pids = process_tree(traced.proc.pid)
        on = Target(traced.url, "/v1/chat/completions", {"Authorization": f"Bearer {secret}"}, lambda: traced_pids)
        print("\n== OpenTelemetry: CPU per request with tracing on (ratio 1.0, OTLP/HTTP to a receiver) beside off ==")
        for model, _, _ in routes.values():  # warm the traced daemon as the other was
            loadgen.closed_loop(on.host, on.port, on.raw(chat_body(model, 1024)), 4, 0.5)
        time.sleep(3)  # the warm-up's spans are exported (export_delay_s = 2) before counting
        spans_before = receiver.received.count
        requests = 0
        for name, (model, _, _) in routes.items():
            cells = []
            for conns in (1, 64):
                body = chat_body(model, 1024)
                off_t = gateway()
                off_windows, windows = [], []
                for _ in range(args.repeat):  # off and on in turns: a busy machine weighs on both alike
                    off_windows.append(off_t.measure(lambda: loadgen.closed_loop(
                        off_t.host, off_t.port, off_t.raw(body), conns, args.seconds)))
                    windows.append(on.measure(lambda: loadgen.closed_loop(
                        on.host, on.port, on.raw(body), conns, args.seconds)))
                requests += sum(w.result.done for w in windows) + 3 * conns * args.repeat  # + closed_loop's warm-up
                off, traced_w = median_window(off_windows), median_window(windows)
                cells.append((off, traced_w))
                print(f"  {name:14} {conns:2} conns: CPU {off['cpu_ms']:.3f} ms off, {traced_w['cpu_ms']:.3f} ms on "
                      f"({(traced_w['cpu_ms'] / off['cpu_ms'] - 1) * 100:+.0f}%); p50 {off['p50']:.2f} -> "
                      f"{traced_w['p50']:.2f} ms, p99 {off['p99']:.2f} -> {traced_w['p99']:.2f} ms")
            figures[("tracing", name)] = cells
        time.sleep(3)  # the last batches
        received = receiver.received.count - spans_before
        print(f"  spans received by the collector: {received} for {requests} requests "
              f"({received / max(requests, 1):.2f} a request; 2 when none was dropped)")
    finally:
        traced.stop()
        receiver.stop()


def median_window(windows: list[Window]) -> dict:
    latencies = [x for w in windows for x in w.result.latencies]
    ttfb = [x for w in windows for x in w.result.ttfb]
    return {
        "cpu_ms": statistics.median(w.cpu_ms for w in windows),
        "rps": statistics.median(w.rps for w in windows),
        "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99),
        "ttfb50": pct(ttfb, 0.5), "ttfb99": pct(ttfb, 0.99),
        "n": sum(w.result.done for w in windows),
    }


class SlowSteps:
    """Reads the daemon's loop-watch lines (GATEWAYD_SLOW_STEP_MS) between two marks."""

    LINE = re.compile(r'slow task step: ([\d.]+) ms CPU .*? in task (.*?), next suspended at ([^"]*)')

    GC = re.compile(r"slow garbage collection: ([\d.]+) ms CPU, generation (\d)")

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.mark = 0
        self.collections: list[float] = []  # slow GC passes (ms) seen by the last since_mark()

    def since_mark(self) -> list[tuple[float, str]]:
        lines = self.daemon.output.lines[self.mark:]
        self.mark += len(lines)
        found = []
        self.collections = []
        for line in lines:
            m = self.LINE.search(line)
            if m:
                found.append((float(m.group(1)), m.group(3)))
            m = self.GC.search(line)
            if m:
                self.collections.append(float(m.group(1)))
        return found

    def summary(self, slow: list[tuple[float, str]], threshold: float) -> str:
        text = f"loop steps over {threshold:g} ms: {len(slow)}"
        if slow:
            text += f", longest {max(slow)[0]:.1f} ms (next suspended at {max(slow)[1]})"
        if self.collections:
            text += (f"; garbage collections over {threshold:g} ms: {len(self.collections)}, "
                     f"longest {max(self.collections):.1f} ms")
        return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2, help="length of each measured window")
    parser.add_argument("--repeat", type=int, default=3, help="windows per figure (the median is printed)")
    parser.add_argument("--rate", type=float, default=100, help="the paced rate, requests/s")
    parser.add_argument("--paced-seconds", type=float, default=5)
    parser.add_argument("--open-streams", type=int, default=1000)
    parser.add_argument("--soak-requests", type=int, default=5000,
                        help="requests in the memory-drift soak (issue 15's figure is 200000; 0 skips it)")
    parser.add_argument("--soak-concurrency", type=int, default=32)
    parser.add_argument("--slow-step-ms", type=float, default=2.0)
    parser.add_argument("--only", default="", help="comma list of sections: concurrency,floors,sizes,paced,streams,"
                        "tracing,memory,soak,workers (workers only when named)")
    parser.add_argument("--workers", default="1,2", help="the workers section: worker counts")
    parser.add_argument("--databases", default="sqlite,postgres", help="the workers section: databases")
    parser.add_argument("--write-readme", action="store_true", help="rewrite README.md's performance table")
    parser.add_argument("--litellm", default=os.environ.get("GATEWAYD_BENCH_LITELLM", ""),
                        help="LiteLLM's `litellm` command: measure it as the peer in this run (bench/litellm_peer.py)")
    args = parser.parse_args()
    sections = set(args.only.split(",")) if args.only else {"concurrency", "floors", "sizes", "paced", "streams",
                                                             "tracing", "memory", "soak"}
    pinned = (os.cpu_count() or 1) >= 2
    if pinned:
        os.sched_setaffinity(0, BENCH_CORE)

    sim = Sim()
    workdir = Path(tempfile.mkdtemp(prefix="gatewayd-bench-"))
    try:
        nginx = Nginx(workdir / "nginx", capture(sim.url))
    except BaseException:
        sim.stop()
        raise
    try:
        # no loop-watch instrument here: it costs ~0.2 ms a request (a CPU clock read around every
        # task step); the sizes section runs an instrumented twin for the longest step
        daemon = Daemon(workdir / "gw", nginx.url)
    except BaseException:
        nginx.stop()
        sim.stop()
        raise
    figures: dict = {"args": vars(args)}
    try:
        if pinned:
            pin(sim.proc.pid, BENCH_CORE)
            for pid in nginx.pids:
                pin(pid, BENCH_CORE)
            pin(daemon.proc.pid, GATEWAY_CORE)
        account = daemon.admin.account("bench@example.com", paid_usd="100000000")
        secret = daemon.admin.key(account["id"], name="bench")["secret"]
        gw_headers = {"Authorization": f"Bearer {secret}"}
        gw_pid = daemon.proc.pid
        gw_pids = process_tree(gw_pid)
        rss_idle = rss_kib(gw_pid)

        def gateway() -> Target:
            return Target(daemon.url, "/v1/chat/completions", gw_headers, lambda: gw_pids)

        routes = {
            # name: (gateway model, floor target, floor body maker)
            "pass-through": ("gpt-4.1-mini", Target(nginx.url, "/v1/chat/completions", {}, lambda: nginx.pids),
                             lambda size, stream=False: chat_body("gpt-4.1-mini", size, stream)),
            "translated": ("claude-haiku-4-5",
                           Target(nginx.url, "/v1/messages", {"anthropic-version": "2023-06-01"},
                                  lambda: nginx.pids),
                           lambda size, stream=False: chat_body("claude-haiku-4-5", size, stream)),
        }
        where = f"gateway pinned to core {min(GATEWAY_CORE)}"
        print(f"gatewayd bench: {os.cpu_count()} cores, {where}, load generator, nginx and simulator pinned to core "
              f"{min(BENCH_CORE)}; store: SQLite (--only workers: 2 workers, PostgreSQL)"
              if pinned else "gatewayd bench: 1 core, not pinned")
        print(f"windows of {args.seconds:g} s x {args.repeat} (median); upstream: nginx serving the simulator's "
              f"answers; gateway RSS at start {rss_idle / 1024:.1f} MiB")
        load = os.getloadavg()
        figures["load"] = load
        print(f"machine load average at start: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")

        # warm both routes (tokenizer tables, pools) before anything is measured
        for model, _, _ in routes.values():
            loadgen.closed_loop(gateway().host, gateway().port, gateway().raw(chat_body(model, 1024)), 4, 0.5)
        rss_warm = rss_kib(gw_pid)
        figures["rss_idle"], figures["rss_warm"] = rss_idle, rss_warm

        peer = dict(LITELLM_ISSUE_15)
        if args.litellm:
            peer = peer_section(args, nginx.url, workdir, pinned)
        figures["peer"] = peer

        if "concurrency" in sections:
            print("\n== CPU per request and requests/s, 1 KB non-streaming, closed loop ==")
            print(f"{'route':14} {'conns':>5} | {'gw CPU ms':>9} {'gw req/s':>8} {'p50':>7} {'p99':>7} | "
                  f"{'floor CPU':>9} {'floor r/s':>9} {'p50':>6} | {'CPU x floor':>11}")
            for name, (model, floor, make) in routes.items():
                for conns in (1, 16, 64):
                    gw_t, body = gateway(), chat_body(model, 1024)
                    gw = median_window([gw_t.measure(lambda: loadgen.closed_loop(
                        gw_t.host, gw_t.port, gw_t.raw(body), conns, args.seconds)) for _ in range(args.repeat)])
                    fl = median_window([floor.measure(lambda: loadgen.closed_loop(
                        floor.host, floor.port, floor.raw(make(1024)), conns, args.seconds / 2))
                        for _ in range(args.repeat)])
                    figures[("conc", name, conns)] = (gw, fl)
                    print(f"{name:14} {conns:5} | {gw['cpu_ms']:9.3f} {gw['rps']:8.0f} {gw['p50']:7.2f} "
                          f"{gw['p99']:7.2f} | {fl['cpu_ms']:9.3f} {fl['rps']:9.0f} {fl['p50']:6.2f} | "
                          f"{gw['cpu_ms'] / max(fl['cpu_ms'], 1e-3):11.0f}")
                one, many = figures[("conc", name, 1)][0], figures[("conc", name, 64)][0]
                print(f"{'':14} CPU at 64 vs 1: {(many['cpu_ms'] / one['cpu_ms'] - 1) * 100:+.0f}% (goal within 10%); "
                      f"p99/p50 at 64: {many['p99'] / many['p50']:.1f}x (goal under 3x); "
                      f"LiteLLM CPU / ours at 1 / 64 conns: {peer['cpu_1'] / one['cpu_ms']:.1f}x / "
                      f"{peer['cpu_64'] / many['cpu_ms']:.1f}x (goal 10x; {peer['source']})")

        if "workers" in sections:
            workers_section(args, nginx.url, workdir, figures)

        if "floors" in sections:
            print("\n== the layers' floors, 1 KB, 1 and 64 connections (CPU per request of the server measured) ==")
            bare = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_asgi.py")], stdout=subprocess.PIPE,
                                    text=True)
            proxy = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_proxy.py"), nginx.url],
                                     stdout=subprocess.PIPE, text=True)
            llhttp = []  # the proposal's floors (bench/floor_llhttp.py), when httptools is installed
            try:
                import httptools  # noqa: F401
            except ImportError:
                print("  (pip install httptools to also measure the llhttp floors of bench/floor_llhttp.py)")
            else:
                for mode in (["answer"], ["proxy", nginx.url]):
                    llhttp.append(subprocess.Popen([sys.executable, str(ROOT / "bench" / "floor_llhttp.py"), *mode],
                                                   stdout=subprocess.PIPE, text=True))
            try:
                bare_url = bare.stdout.readline().split()[-1]
                proxy_url = proxy.stdout.readline().split()[-1]
                llhttp_urls = [p.stdout.readline().split()[-1] for p in llhttp]
                if pinned:
                    for process in (bare, proxy, *llhttp):
                        pin(process.pid, GATEWAY_CORE)
                proposal = (
                    ("proposal: trio + llhttp, canned answer (bench/floor_llhttp.py)",
                     Target(llhttp_urls[0], "/v1/chat/completions", {}, lambda: [llhttp[0].pid]), "POST"),
                    ("proposal: trio + llhttp, proxy to the same upstream",
                     Target(llhttp_urls[1], "/v1/chat/completions", {}, lambda: [llhttp[1].pid]), "POST"),
                ) if llhttp else ()
                layers = (
                    ("nginx, canned answer", Target(nginx.url, "/v1/chat/completions", {}, lambda: nginx.pids), "POST"),
                    ("hypercorn + bare ASGI app", Target(bare_url, "/", {}, lambda: [bare.pid]), "POST"),
                    ("hypercorn + bare ASGI proxy through the upstream pool (no gateway work)",
                     Target(proxy_url, "/v1/chat/completions", {}, lambda: [proxy.pid]), "POST"),
                    ("the simulator (a quart-trio app), direct", Target(sim.url, "/v1/chat/completions",
                                                                        {"Authorization": "Bearer sim"},
                                                                        lambda: [sim.proc.pid]), "POST"),
                    ("gateway GET /healthz (hypercorn, Quart, listener, request log)",
                     Target(daemon.url, "/healthz", {}, lambda: gw_pids), "GET"),
                    *proposal,
                )
                for label, target, method in layers:
                    raw = target.raw(chat_body("gpt-4.1-mini", 1024)) if method == "POST" else (
                        f"GET {target.path} HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n\r\n".encode())
                    cells = []
                    for conns in (1, 64):
                        w = median_window([target.measure(lambda: loadgen.closed_loop(
                            target.host, target.port, raw, conns, args.seconds / 2)) for _ in range(args.repeat)])
                        cells.append(w)
                    figures[("floor", label)] = cells
                    print(f"  {label:72} CPU {cells[0]['cpu_ms']:.3f} / {cells[1]['cpu_ms']:.3f} ms, "
                          f"{cells[0]['rps']:.0f} / {cells[1]['rps']:.0f} req/s at 1 / 64 connections")
            finally:
                for process in (bare, proxy, *llhttp):
                    process.terminate()
                    process.wait(10)

        if "sizes" in sections:
            watched = Daemon(workdir / "gw-watched", nginx.url, env={"GATEWAYD_SLOW_STEP_MS": str(args.slow_step_ms)})
            if pinned:
                pin(watched.proc.pid, GATEWAY_CORE)
            steps = SlowSteps(watched)
            watched_account = watched.admin.account("bench@example.com", paid_usd="100000000")
            watched_t = Target(watched.url, "/v1/chat/completions",
                               {"Authorization": f"Bearer {watched.admin.key(watched_account['id'], name='b')['secret']}"},
                               lambda: [watched.proc.pid])
            for model, _, _ in routes.values():
                loadgen.closed_loop(watched_t.host, watched_t.port, watched_t.raw(chat_body(model, 1024)), 4, 0.5)
            print("\n== CPU per request by body size, 1 connection (longest loop step: an instrumented twin) ==")
            print(f"{'route':14} {'KB':>5} | {'gw CPU ms':>9} {'p50 ms':>8} {'longest step':>12} | "
                  f"{'floor CPU':>9}")
            for name, (model, floor, make) in routes.items():
                costs = {}
                for kb in (1, 100, 400, 1600):
                    gw_t, body = gateway(), chat_body(model, kb * 1024)
                    gw = median_window([gw_t.measure(lambda: loadgen.closed_loop(
                        gw_t.host, gw_t.port, gw_t.raw(body), 1, args.seconds, warmup=1))
                        for _ in range(args.repeat)])
                    steps.since_mark()
                    loadgen.closed_loop(watched_t.host, watched_t.port, watched_t.raw(body), 1, args.seconds, warmup=1)
                    slow = steps.since_mark()
                    fl = median_window([floor.measure(lambda: loadgen.closed_loop(
                        floor.host, floor.port, floor.raw(make(kb * 1024)), 1, args.seconds / 2, warmup=1))
                        for _ in range(args.repeat)])
                    longest = max(slow)[0] if slow else 0.0
                    costs[kb] = gw["cpu_ms"]
                    figures[("size", name, kb)] = (gw, fl, longest, slow)
                    print(f"{name:14} {kb:5} | {gw['cpu_ms']:9.2f} {gw['p50']:8.2f} "
                          f"{('> %.0f ms: %.1f' % (args.slow_step_ms, longest)) if slow else ('<= %g ms' % args.slow_step_ms):>12} | "
                          f"{fl['cpu_ms']:9.3f}")
                    if slow:
                        print(f"{'':21} longest at {max(slow)[1]} ({len(slow)} steps over)")
                per_kb = (costs[1600] - costs[1]) / 1599 * 1000
                figures[("per_kb", name)] = per_kb
                print(f"{'':14} cost per KB: {per_kb:.1f} us (goal: at most 5 us past JSON parsing)")
            watched.stop()

        if "paced" in sections:
            print(f"\n== latency at a paced {args.rate:g} req/s, 1 KB non-streaming ({args.paced_seconds:g} s) ==")
            for name, (model, floor, make) in routes.items():
                gw_t = gateway()
                gw = median_window([gw_t.measure(lambda: loadgen.paced(
                    gw_t.host, gw_t.port, gw_t.raw(chat_body(model, 1024)), args.rate, args.paced_seconds))])
                fl = median_window([floor.measure(lambda: loadgen.paced(
                    floor.host, floor.port, floor.raw(make(1024)), args.rate, args.paced_seconds))])
                figures[("paced", name)] = (gw, fl)
                print(f"{name:14} gateway p50 {gw['p50']:6.2f} p99 {gw['p99']:6.2f} ms | floor p50 {fl['p50']:5.2f} "
                      f"p99 {fl['p99']:5.2f} ms | added p50 {gw['p50'] - fl['p50']:+.2f} p99 {gw['p99'] - fl['p99']:+.2f} ms"
                      f" | gateway CPU {gw['cpu_ms']:.2f} ms/request")

        if "streams" in sections:
            print("\n== streams at 16 connections (closed loop, 34 events a stream) ==")
            for name, (model, floor, make) in routes.items():
                gw_t, body = gateway(), chat_body(model, 1024, stream=True)
                fl_stream = Target(nginx.url, floor.path,
                                   {**floor.headers, "Accept": "text/event-stream"}, floor.pids)
                gw = median_window([gw_t.measure(lambda: loadgen.closed_loop(
                    gw_t.host, gw_t.port, gw_t.raw(body), 16, args.seconds)) for _ in range(args.repeat)])
                fl = median_window([fl_stream.measure(lambda: loadgen.closed_loop(
                    fl_stream.host, fl_stream.port, fl_stream.raw(make(1024, True)), 16, args.seconds / 2))
                    for _ in range(args.repeat)])
                figures[("streams", name)] = (gw, fl)
                print(f"{name:14} gateway {gw['rps']:6.0f} streams/s, CPU {gw['cpu_ms']:.2f} ms/stream, TTFB p50 "
                      f"{gw['ttfb50']:.2f} ms | floor {fl['rps']:6.0f}/s, TTFB p50 {fl['ttfb50']:.2f} ms | added TTFB "
                      f"p50 {gw['ttfb50'] - fl['ttfb50']:+.2f} ms p99 {gw['ttfb99'] - fl['ttfb99']:+.2f} ms | "
                      f"{gw['rps'] / peer['streams_16']:.1f}x LiteLLM's {peer['streams_16']:.0f}/s (goal 20x)")
        if "tracing" in sections:
            tracing_section(args, nginx.url, workdir, routes, gateway, pinned, figures)
    finally:
        daemon.stop()
        nginx.stop()

    if "memory" in sections:
        print(f"\n== memory: {args.open_streams} open streams (through the simulator, streams stalled open) ==")
        mem_daemon = Daemon(workdir / "mem", sim.url)
        try:
            if pinned:
                pin(mem_daemon.proc.pid, GATEWAY_CORE)

            def target_of_new_account(i: int) -> Target:
                account = mem_daemon.admin.account(f"mem{i}@example.com", paid_usd="100000000")
                secret = mem_daemon.admin.key(account["id"], name="mem")["secret"]
                return Target(mem_daemon.url, "/v1/chat/completions", {"Authorization": f"Bearer {secret}"},
                              lambda: [mem_daemon.proc.pid])

            # The streams come from MEMORY_ACCOUNTS accounts, as a busy gateway's do: one account
            # alone may hold half of the upstream pool's 1,000 connections (providers/fair_slots.py)
            # and 256 requests in flight ([server] max_concurrent_per_account).
            pid = mem_daemon.proc.pid
            idle = rss_kib(pid)
            targets = [target_of_new_account(i) for i in range(MEMORY_ACCOUNTS)]
            target = targets[0]
            warm_body = orjson.dumps({"model": "gpt-4.1-mini", "stream": True, "max_tokens": 64, "messages": [
                {"role": "user", "content": "warm [[sim:words=30]]"}]})
            loadgen.closed_loop(target.host, target.port, target.raw(warm_body), 8, 1.0)
            stalled = orjson.dumps({"model": "gpt-4.1-mini", "stream": True, "max_tokens": 64, "messages": [
                {"role": "user", "content": "hold me open [[sim:words=30]] [[sim:fault=stall_after:2]]"}]})
            # a first batch grows the pools to steady state; the figure is what the next ones cost.
            # Its streams end on their own a few seconds after the client closed them (the gateway
            # reads a stream on to its usage when the client leaves: a stalled one would keep its
            # upstream connection until the idle timeout)
            slow = orjson.dumps({"model": "gpt-4.1-mini", "stream": True, "max_tokens": 64, "messages": [
                {"role": "user", "content": "warm [[sim:words=4]] [[sim:fault=chunk_delay_ms:400]]"}]})
            base_seen, base = loadgen.open_streams(target.host, target.port, target.raw(slow), 100,
                                                   lambda: rss_kib(pid))
            time.sleep(4)  # those streams end (about 10 events, 0.4 s apart)
            # wait for RSS to settle: closing those streams counts their output, which loads the
            # tokenizer (tens of MB) the first time; counting that as per-stream cost doubled it
            before, deadline = rss_kib(pid), time.monotonic() + 15
            while time.monotonic() < deadline:
                time.sleep(1)
                now = rss_kib(pid)
                if abs(now - before) < 512:
                    break
                before = now
            seen, during = loadgen.open_streams(target.host, target.port, [t.raw(stalled) for t in targets],
                                                args.open_streams, lambda: rss_kib(pid))
            time.sleep(1)
            after = rss_kib(pid)
            per_stream = (during - before) / max(1, seen)
            figures.update(mem_idle=idle, mem_before=before, mem_during=during, mem_after=after, mem_seen=seen,
                           mem_per_stream=per_stream)
            print(f"idle RSS {idle / 1024:.1f} MiB (fresh), {before / 1024:.1f} MiB after warm-up; with {seen} streams "
                  f"open {during / 1024:.1f} MiB; after they closed {after / 1024:.1f} MiB")
            print(f"per open stream: {per_stream:.1f} KiB (goal under 50 KB; includes the upstream connection)")
        finally:
            mem_daemon.stop()
    sim.stop()

    if "soak" in sections and args.soak_requests:
        print(f"\n== memory drift: a mixed soak with faults, {args.soak_requests} requests "
              f"(issue 15's figure is 200,000: --soak-requests 200000) ==")
        result = soak(seconds=0, requests=args.soak_requests, concurrency=args.soak_concurrency,
                      pin_daemon=GATEWAY_CORE if pinned else None)
        ok = print_report(result)
        figures["soak"] = result
        if not ok:
            print("SOAK FAILED")
    if args.write_readme:
        write_readme(figures)
        print("\nREADME.md performance table rewritten")
    return 0


def write_readme(f: dict) -> None:
    """Replace the table in README.md's Performance section with this run's figures."""
    rows = []

    def row(label: str, *cells: str) -> None:
        rows.append(f"| {label} | " + " | ".join(cells) + " |")

    peer = f.get("peer")
    if peer and peer.get("source") == "measured in this run":
        row("peer: LiteLLM 1 worker, CPU per request at 1 / 64 connections (ms); streams/s at 16 connections",
            f"{peer['cpu_1']:.1f} / {peer['cpu_64']:.1f}; {peer['streams_16']:.0f}", "")
    for name in ("pass-through", "translated"):
        if ("conc", name, 1) not in f:
            continue
        c = {n: f[("conc", name, n)] for n in (1, 16, 64)}
        row(f"{name}: CPU per request at 1 / 16 / 64 connections (ms)",
            " / ".join(f"{c[n][0]['cpu_ms']:.2f}" for n in (1, 16, 64)),
            " / ".join(f"{c[n][1]['cpu_ms']:.3f}" for n in (1, 16, 64)))
        row(f"{name}: requests/s at 1 / 16 / 64 connections",
            " / ".join(f"{c[n][0]['rps']:.0f}" for n in (1, 16, 64)),
            " / ".join(f"{c[n][1]['rps']:.0f}" for n in (1, 16, 64)))
        row(f"{name}: p50 / p99 at 64 connections (ms)", f"{c[64][0]['p50']:.1f} / {c[64][0]['p99']:.1f}",
            f"{c[64][1]['p50']:.1f} / {c[64][1]['p99']:.1f}")
        if peer:
            row(f"{name}: LiteLLM's CPU per request / ours, at 1 / 64 connections ({peer['source']})",
                f"{peer['cpu_1'] / c[1][0]['cpu_ms']:.1f}x / {peer['cpu_64'] / c[64][0]['cpu_ms']:.1f}x", "")
    for (_, label), cells in [(k, v) for k, v in f.items() if isinstance(k, tuple) and k[0] == "floor"]:
        row(f"floor: {label}, CPU per request at 1 / 64 connections (ms)", "",
            f"{cells[0]['cpu_ms']:.3f} / {cells[1]['cpu_ms']:.3f}")
    for name in ("pass-through", "translated"):
        if ("size", name, 1) not in f:
            continue
        sizes = (1, 100, 400, 1600)
        row(f"{name}: CPU per request, 1 / 100 / 400 / 1,600 KB body (ms)",
            " / ".join(f"{f[('size', name, kb)][0]['cpu_ms']:.1f}" for kb in sizes),
            " / ".join(f"{f[('size', name, kb)][1]['cpu_ms']:.2f}" for kb in sizes))
        row(f"{name}: longest event-loop step, 1,600 KB body (ms)",
            f"{f[('size', name, 1600)][2]:.1f}" if f[('size', name, 1600)][2] else f"under {f['args']['slow_step_ms']:g}",
            "")
    for name in ("pass-through", "translated"):
        if ("paced", name) in f:
            gw, fl = f[("paced", name)]
            row(f"{name}: added latency at a paced {f['args']['rate']:g} req/s, p50 / p99 (ms)",
                f"+{gw['p50'] - fl['p50']:.2f} / +{gw['p99'] - fl['p99']:.2f}",
                f"{fl['p50']:.2f} / {fl['p99']:.2f} (latency)")
    for name in ("pass-through", "translated"):
        if ("streams", name) in f:
            gw, fl = f[("streams", name)]
            row(f"{name}: streams/s at 16 connections; added time to first byte p50 (ms)",
                f"{gw['rps']:.0f}; +{gw['ttfb50'] - fl['ttfb50']:.2f}", f"{fl['rps']:.0f}; {fl['ttfb50']:.2f}")
            if peer:
                row(f"{name}: streams/s, ours / LiteLLM's ({peer['source']})", f"{gw['rps'] / peer['streams_16']:.1f}x", "")
    for name in ("pass-through", "translated"):
        if ("tracing", name) in f:
            cells = f[("tracing", name)]
            row(f"{name}: CPU per request with OpenTelemetry tracing off / on (ratio 1.0), at 1 / 64 connections (ms)",
                " / ".join(f"{off['cpu_ms']:.2f} -> {on['cpu_ms']:.2f}" for off, on in cells), "")
    if "mem_per_stream" in f:
        row("memory: RSS idle (after warm-up) / with 1,000 open streams (MiB); per stream (KiB)",
            f"{f['mem_before'] / 1024:.0f} / {f['mem_during'] / 1024:.0f}; {f['mem_per_stream']:.0f}", "")
    if "soak" in f:
        s = f["soak"]
        row(f"memory: RSS drift over a {s['tally'].requests:,}-request soak with faults",
            f"{s['drift'] * 100:+.1f}% ({s['rss_warm'] / 1024:.0f} -> {s['rss_end'] / 1024:.0f} MiB)", "")
    if "load" in f:
        row("the machine's load average (1 / 5 / 15 min) when the run started", " / ".join(f"{x:.1f}" for x in f["load"]),
            f"{os.cpu_count()} cores")
    table = "| | gatewayd | floor (nginx direct) |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    readme = ROOT / "README.md"
    text = readme.read_text()
    start = text.index("<!-- bench:start -->")
    end = text.index("<!-- bench:end -->")
    readme.write_text(text[: start + len("<!-- bench:start -->")] + "\n" + table + text[end:])


if __name__ == "__main__":
    sys.exit(main())
