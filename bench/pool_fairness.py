"""Pool fairness: one account's slow streams beside another account's plain request.

The figure ``tests/test_attack_fairness.py`` used to assert (a wall-clock bound, which a busy
machine breaks: issue 30, point 6): account A holds 12 stalled streams on an upstream pool of 8
connections; how long account B's plain request takes, alone and beside A's streams. The test
keeps what can be asserted without a clock (B is answered 200, not made to wait out the pool).
A benchmark that prints figures, not a test:

    .venv/bin/python bench/pool_fairness.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gatewayd.providers.upstream import Upstream  # noqa: E402
from tests.inproc import Gateway  # noqa: E402
from tests.live import Sim  # noqa: E402
from tests.test_attack_fairness import STALL, chat, drive, end_streams, wait_until  # noqa: E402


async def one_round(sim_url: str, tmp: Path) -> tuple[float, float]:
    upstream = Upstream(connect_timeout_s=3, stream_idle_timeout_s=30, max_connections=8)
    gw = Gateway(tmp, None, upstream=upstream, upstream_url=sim_url)
    try:
        _, a_secret = await gw.funded_key()
        _, b_secret = await gw.funded_key()
        alone = []
        for _ in range(3):
            began = time.perf_counter()
            await drive(gw, b_secret, chat("warm up"))
            alone.append(time.perf_counter() - began)
        leave = trio.Event()
        streaming = [trio.Event() for _ in range(12)]
        async with trio.open_nursery() as nursery:
            for i, started in enumerate(streaming):
                nursery.start_soon(partial(drive, gw, a_secret, chat(f"slow {i} {STALL}", stream=True), leave=leave,
                                           started=started))
            await wait_until(lambda: gw.ledger.open_holds == 12, "A's 12 requests held")
            await wait_until(lambda: sum(e.is_set() for e in streaming) >= 4, "A's streams on the pool")
            await trio.sleep(0.2)
            began = time.perf_counter()
            answer = await drive(gw, b_secret, chat("my turn"))
            beside = time.perf_counter() - began
            await end_streams(gw, leave)
        assert answer["status"] == 200, answer
        return min(alone), beside
    finally:
        await upstream.aclose()
        await gw.aclose()


async def main(rounds: int) -> None:
    sim = Sim()
    try:
        figures = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as tmp:
                figures.append(await one_round(sim.url, Path(tmp)))
    finally:
        sim.stop()
    alone = statistics.median(a for a, _ in figures) * 1000
    beside = statistics.median(b for _, b in figures) * 1000
    print(f"account B's plain request, median of {rounds}: {alone:.1f} ms alone, "
          f"{beside:.1f} ms beside account A's 12 stalled streams on an 8-connection pool")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    trio.run(main, parser.parse_args().rounds)
