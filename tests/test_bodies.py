"""The body budgets (gatewayd.bodies): bytes counted as they arrive, a share per owner, all returned on close."""

from __future__ import annotations


from gatewayd.bodies import UNKNOWN_OWNER, BodyBudget, BodyPools, account_owner
from gatewayd.config import ServerSettings


def test_chunks_are_counted_as_they_arrive_and_given_back_on_close():
    budget = BodyBudget(4000)
    lease = budget.lease()
    lease.assign(account_owner("a"))
    assert budget.held == 0  # an owner named, a length maybe declared: nothing held yet
    assert lease.receive(500) is None and lease.receive(100) is None and budget.held == 600
    lease.close()
    assert budget.held == 0 and budget.by_owner == {}


def test_bytes_read_before_the_owner_is_known_share_one_owner():
    budget = BodyBudget(4000)
    first, second = budget.lease(), budget.lease()
    assert first.receive(1000) is None and second.receive(1) is not None  # one share for them all
    first.assign("account:a")  # too late: the bytes stay where they were counted
    assert budget.by_owner == {UNKNOWN_OWNER: 1000}
    first.close()
    assert budget.held == 0


def test_one_owner_gets_a_quarter_and_the_pool_the_whole():
    budget = BodyBudget(4000)
    first = budget.lease("account:a")
    assert first.receive(1000) is None
    second = budget.lease("account:a")  # another key of the same account: the same share
    refused = second.receive(1)
    assert refused.status == 503 and refused.code == "server_busy" and refused.headers["retry-after"] == "2"
    assert "for this account" in refused.message and budget.held == 1000  # a refusal takes nothing
    others = [budget.lease(f"account:{n}") for n in "bcd"]
    assert all(lease.receive(1000) is None for lease in others)
    late = budget.lease("account:e")
    refused = late.receive(1)
    assert refused is not None and "for all callers" in refused.message and late.held == 0
    for lease in [first, *others]:
        lease.close()
    assert late.receive(1000) is None
    late.close()
    assert budget.held == 0 and budget.by_owner == {}


def test_a_message_given_back_leaves_the_rest_held():
    budget = BodyBudget(4000, owner_max=3000)
    lease = budget.lease("account:a")
    assert lease.receive(2500) is None and lease.receive(600) is not None  # the owner's bound, not a quarter
    lease.give_back(2000)
    assert budget.held == 500 and lease.receive(600) is None
    lease.close()
    assert budget.held == 0


def test_the_pools_are_separate():
    server = ServerSettings(listen=(), admin_socket="", data_dir="", stream_idle_timeout_s=1, max_body_bytes=10,
                            trusted_proxies=(), models_visible_after_paid_nano=0, shutdown_grace_s=1, tls_cert=None,
                            tls_key=None, upstream_connect_timeout_s=1, console_secret=None, max_buffered_bytes=4000,
                            console_buffered_bytes=400, webhook_buffered_bytes=40)
    pools = BodyPools.from_settings(server)
    assert pools.for_app_path("/console/signin") is pools.console
    assert pools.for_app_path("/webhooks/stripe") is pools.webhook
    api = pools.api.lease("account:a")
    assert api.receive(1000) is None and pools.console.held == 0
    assert pools.console.lease("address:1.2.3.4").receive(100) is None
    assert pools.webhook.lease("address:1.2.3.4").receive(10) is None
    assert pools.api.owner_max == 1000 and pools.console.owner_max == 100 and pools.webhook.owner_max == 10


def test_a_closed_lease_takes_nothing_more():
    """A WebSocket's frames may still be buffered by hypercorn after its app has ended: they must
    not be counted against the account with no one left to give them back."""
    budget = BodyBudget(4000)
    lease = budget.lease("account:a")
    assert lease.receive(100) is None
    lease.close()
    assert lease.receive(100) is not None and budget.held == 0 and lease.held == 0
