"""Concurrency: many requests at once against a balance (or a key spend limit) that covers
only a few of them. Holds are taken atomically, so the balance never goes below zero by
more than one request's estimate error, and settlement is exact whatever the interleaving.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from gatewayd.money import usd_to_nano
from tests.faults import assert_money_consistent, chat_body, headers, messages_body, unique_email
from tests.live import Daemon

N = 30
INPUT_PRICES = {"gpt-4.1-mini": 400, "claude-haiku-4-5": 1000}


@pytest.fixture(scope="module")
def poor_daemon(sim, tmp_path_factory):
    """Models visible from the first cent, so an account can hold just a few requests' worth."""
    d = Daemon(tmp_path_factory.mktemp("poor"), sim.url, server="models_visible_after_paid = 0\n")
    yield d
    d.stop()


def _request_body(i: int) -> tuple[str, dict]:
    # output allowance == what the simulator produces, so each estimate is close to its charge
    text = f"concurrent {i} [[sim:words=60]] [[sim:fault=chunk_delay_ms:5]]"
    stream = i % 2 == 0
    if i % 3 == 0:
        return "/v1/messages", messages_body(text, stream=stream, max_tokens=60)
    return "/v1/chat/completions", chat_body(text, stream=stream, max_tokens=60)


def _storm(daemon, secret: str, sample: callable) -> tuple[list[int], list[int]]:
    """N requests released together; meanwhile the balance is sampled. Returns statuses, samples."""
    statuses: list[int] = [0] * N
    barrier = threading.Barrier(N)
    samples: list[int] = []
    done = threading.Event()

    def one(i: int) -> None:
        path, body = _request_body(i)
        with httpx.Client(timeout=30) as http:
            barrier.wait()
            with http.stream("POST", daemon.url + path, json=body, headers=headers(secret)) as response:
                response.read()
                statuses[i] = response.status_code

    def watch() -> None:
        while not done.is_set():
            samples.append(sample())
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    done.set()
    watcher.join()
    return statuses, samples


def _worst_input_error(rows: list[dict]) -> int:
    """Bound for one request's estimate error: its whole input priced (the output cannot exceed max_tokens)."""
    return max(r["input_tokens"] * INPUT_PRICES[r["model"]] for r in rows)


@pytest.mark.slow
def test_concurrent_requests_never_overdraw_the_balance(poor_daemon):
    paid = usd_to_nano("0.0008")  # about five requests' holds (60 output tokens at $1.60-$5 per 1M)
    account = poor_daemon.admin.account(unique_email("storm"), paid_usd="0.0008")
    secret = poor_daemon.admin.key(account["id"])["secret"]
    statuses, samples = _storm(poor_daemon, secret,
                               lambda: poor_daemon.admin.balance(account["id"])["balance_nano"])
    ok = statuses.count(200)
    assert set(statuses) <= {200, 403}, statuses
    assert 2 <= ok < N, statuses  # some fit, most were refused up front
    rows = poor_daemon.admin.usage(account["id"], limit=1000)
    assert len(rows) == ok and all(r["status"] == "ok" for r in rows)
    floor = -_worst_input_error(rows)
    assert min(samples) >= floor, (min(samples), floor)
    balance = assert_money_consistent(poor_daemon, account["id"], paid_nano=paid)
    assert balance["balance_nano"] >= floor


@pytest.mark.slow
def test_concurrent_requests_respect_a_key_spend_limit(gateway):
    account = gateway.admin.account(unique_email("storm-key"))
    limit = usd_to_nano("0.0008")
    key = gateway.admin.key(account["id"], spend_limit_nano=limit)

    def spent() -> int:
        return gateway.admin.call("GET", f"/keys/{key['id']}")["spent_nano"]

    statuses, samples = _storm(gateway, key["secret"], spent)
    ok = statuses.count(200)
    assert set(statuses) <= {200, 401, 403}, statuses
    assert 2 <= ok < N, statuses
    rows = gateway.admin.usage(account["id"], limit=1000)
    assert len(rows) == ok
    ceiling = limit + _worst_input_error(rows)
    assert max(samples) <= ceiling and spent() <= ceiling
    assert spent() == sum(r["cost_nano"] for r in rows)
    assert_money_consistent(gateway, account["id"])
