"""Stickiness: how much of the prompt the providers' caches serve, with and without it.

Starts two simulators with their prompt cache on (docs/simulator.md, ``/_sim/settings``),
each one provider of the same model (two routes of equal priority and weight), and two
gatewayd daemons: one with the default routing, one with ``sticky_ttl_s = 0`` (no
stickiness: every turn draws its route by weight). Then runs the same conversations
through each (a system prompt, then ``--turns`` user turns, each sending the whole history
as clients do) and prints the share of prompt tokens read from the cache, and how often a
conversation changed provider between turns. A benchmark that prints figures, not a test:

    .venv/bin/python bench/stickiness.py [--conversations 40] [--turns 6]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live import Daemon, Sim, unique_email  # noqa: E402


def routes_config(a: str, b: str, sticky: bool) -> str:
    routing = "" if sticky else "[routing]\nsticky_ttl_s = 0\n"
    return routing + f"""
[[providers]]
name = "sim-a"
protocol = "openai"
base_url = "{a}/v1"
api_key = "a"

[[providers]]
name = "sim-b"
protocol = "openai"
base_url = "{b}/v1"
api_key = "b"

[[models]]
id = "sticky-model"
input_price = 1.0
output_price = 2.0
[[models.routes]]
provider = "sim-a"
[[models.routes]]
provider = "sim-b"
"""


def run(daemon: Daemon, conversations: int, turns: int, tag: str) -> dict:
    account = daemon.admin.account(unique_email("sticky"), paid_usd="100")
    secret = daemon.admin.key(account["id"])["secret"]
    prompt = cached = switches = 0
    with httpx.Client(base_url=daemon.url, headers={"authorization": f"Bearer {secret}"}, timeout=30) as http:
        for c in range(conversations):
            history = [{"role": "system", "content": f"You are assistant number {c} of run {tag}; answer briefly."}]
            last_id = None
            for t in range(turns):
                history.append({"role": "user", "content": f"Question {t} of conversation {c}: tell me more."})
                r = http.post("/v1/chat/completions", json={"model": "sticky-model", "messages": history})
                r.raise_for_status()
                doc = r.json()
                usage = doc["usage"]
                prompt += usage["prompt_tokens"]
                cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                provider = daemon.admin.usage(account["id"], limit=1)[0]["provider"]  # the newest row
                if last_id is not None and provider != last_id:
                    switches += 1
                last_id = provider
                history.append(doc["choices"][0]["message"])
    return {"prompt": prompt, "cached": cached, "switches": switches, "turn_changes": conversations * (turns - 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    a, b = Sim(), Sim()
    results = {}
    try:
        for sticky in (True, False):
            for sim in (a, b):  # each run starts with cold caches
                sim.http.put("/_sim/settings", json={"prompt_cache": False}).raise_for_status()
                sim.http.put("/_sim/settings", json={"prompt_cache": True}).raise_for_status()
            with tempfile.TemporaryDirectory() as tmp:
                daemon = Daemon(Path(tmp), a.url, extra=routes_config(a.url, b.url, sticky))
                try:
                    results[sticky] = run(daemon, args.conversations, args.turns, "on" if sticky else "off")
                finally:
                    daemon.stop()
    finally:
        a.stop()
        b.stop()
    print(f"{args.conversations} conversations x {args.turns} turns, two providers of equal weight, "
          f"each with its own prefix cache")
    print(f"{'stickiness':<12}{'prompt tokens':>15}{'cached':>10}{'hit rate':>10}{'provider changes':>18}")
    for sticky in (True, False):
        r = results[sticky]
        rate = r["cached"] / r["prompt"] if r["prompt"] else 0.0
        print(f"{'on' if sticky else 'off':<12}{r['prompt']:>15}{r['cached']:>10}{rate:>10.1%}"
              f"{r['switches']:>10} of {r['turn_changes']}")
    on, off = (results[s]["cached"] / results[s]["prompt"] for s in (True, False))
    print(f"difference: {100 * (on - off):+.1f} points of the prompt served from cache")


if __name__ == "__main__":
    main()
