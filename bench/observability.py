"""What the request log line and the metrics cost per request, on this machine.

The listener's end-of-request work, run in a loop: the JSON request line (through stdlib
logging, to /dev/null) and the metrics of one chat request, then each part alone. Figures are
the best of seven rounds (the least disturbed by other processes). It is a benchmark that
prints figures, not a test. Usage:

    .venv/bin/python bench/observability.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import logging
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gatewayd import logs  # noqa: E402
from gatewayd.metrics import Metrics  # noqa: E402
from gatewayd.trace import Trace  # noqa: E402


def finished_request() -> Trace:
    t = Trace("req_0123456789abcdef01234567", "POST", "/v1/chat/completions", "127.0.0.1")
    t.endpoint, t.account_id, t.key_id = "chat", "acct_0123456789ab", "key_0123456789ab"
    t.model, t.provider, t.route, t.stream = "gpt-4.1-mini", "openai", "openai/gpt-4.1-mini", False
    t.status, t.usage_status, t.input_tokens, t.output_tokens, t.cost_nano = 200, "ok", 20, 50, 88_000
    t.upstream_ttfb_s, t.duration_s = 0.011, 0.013
    return t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    for fmt in ("json", "text"):
        logs.setup(fmt, "info")
        logging.getLogger().handlers[0].stream = open("/dev/null", "w")  # noqa: SIM115
        metrics = Metrics()
        t = finished_request()

        def both() -> None:
            logs.request_line(t.fields())
            metrics.observe(t)

        for label, work in (("log line + metrics", both), ("log line", lambda: logs.request_line(t.fields())),
                            ("metrics", lambda: metrics.observe(t))):
            best = min(timeit.repeat(work, number=args.rounds, repeat=7)) / args.rounds
            print(f"{fmt:5s} {label:20s} {best * 1e6:7.1f} us per request")


if __name__ == "__main__":
    main()
