"""A gatewayd with ``[payments.stripe]`` pointed at the loopback fake, and Stripe's deliveries to it."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.live import Daemon
from tests.stripe_fake import SECRET_KEY, WEBHOOK_SECRET, StripeFake, event, signed

_NONCE = re.compile(r'name="nonce" value="([0-9a-f]+)"')


def stripe_section(fake: StripeFake, *, min_amount: str = "5.00", max_amount: str = "1000.00") -> str:
    return (f'\n[payments.stripe]\nsecret_key_env = "STRIPE_SECRET_KEY"\nwebhook_secret_env = "STRIPE_WEBHOOK_SECRET"\n'
            f'currency = "usd"\nmin_amount = {min_amount}\nmax_amount = {max_amount}\napi_base = "{fake.url}"\n')


STRIPE_ENV = {"STRIPE_SECRET_KEY": SECRET_KEY, "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET}


def nonce_of(html: str) -> str:
    match = _NONCE.search(html)
    assert match, "no Add funds form on the page"
    return match.group(1)


def deliver(url: str, kind: str, obj: dict, **sign) -> httpx.Response:
    """One delivery of a fresh event about ``obj``, as Stripe makes it."""
    return deliver_event(url, event(kind, obj), **sign)


def deliver_event(url: str, doc: dict, **sign) -> httpx.Response:
    body, headers = signed(doc, **sign)
    return httpx.post(url + "/webhooks/stripe", content=body, headers=headers, timeout=30)


# Module fixtures for the Stripe test files (imported there: ``from tests.stripe_helpers import ...``)
@pytest.fixture(scope="module", name="fake")
def fake_fixture():
    """The loopback fake of Stripe's API, one per test module."""
    fake = StripeFake()
    yield fake
    fake.close()


@pytest.fixture(scope="module", name="daemon")
def daemon_fixture(sim, fake, tmp_path_factory):
    """A gatewayd with ``[payments.stripe]`` pointed at the fake."""
    d = Daemon(tmp_path_factory.mktemp("stripe"), sim.url, extra=stripe_section(fake), env=STRIPE_ENV)
    yield d
    d.stop()
