"""The body budget (gatewayd.bodies): per process, a quarter per owner, all returned on close."""

from __future__ import annotations

from gatewayd.bodies import ANONYMOUS, BodyBudget


def test_a_declared_length_is_reserved_whole_and_chunks_count_only_beyond_it():
    budget = BodyBudget(4000)
    lease = budget.lease()
    lease.assign("key:a")
    assert lease.reserve(600) is None and budget.held == 600
    assert lease.receive(500) is None and lease.receive(100) is None and budget.held == 600
    lease.close()
    assert budget.held == 0 and budget.by_owner == {}


def test_one_owner_gets_a_quarter_and_the_process_the_whole():
    budget = BodyBudget(4000)
    first = budget.lease("key:a")
    assert first.reserve(1000) is None
    second = budget.lease("key:a")
    refused = second.reserve(1)
    assert refused.status == 503 and refused.code == "server_busy" and refused.headers["retry-after"] == "2"
    assert "for this key" in refused.message and budget.held == 1000  # a refusal takes nothing
    others = [budget.lease(f"key:{n}") for n in "bcd"]
    assert all(lease.reserve(1000) is None for lease in others)
    late = budget.lease(ANONYMOUS)
    refused = late.receive(1)
    assert refused is not None and "for all callers" in refused.message and late.received == 0
    for lease in [first, *others]:
        lease.close()
    assert late.receive(1000) is None and "without a key" in late.receive(1).message
    late.close()
    assert budget.held == 0 and budget.by_owner == {}


def test_a_chunked_body_is_counted_as_it_comes():
    budget = BodyBudget(400)
    lease = budget.lease("key:a")
    assert lease.receive(60) is None and lease.receive(40) is None and budget.held == 100
    assert lease.receive(1) is not None and budget.held == 100
    lease.close()
    assert budget.held == 0
