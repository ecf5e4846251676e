"""The alert outbox's delivery task: claim due rows, send each on every configured channel, mark it.

Runs in every instance (started by ``gatewayd.server``), whatever its config: with no
``[alerts]`` it only waits (rows stay in the outbox until a reload configures a channel).
Rows survive restarts because they are only ever finished by this task, after sending;
a lease (``AlertSettings.lease_s``) on each claimed row keeps two instances from sending
the same alert, and a lease that ran out (an instance that died mid-delivery) lets another
take the row. Delivery is at least once: an instance that dies after sending and before
marking the row sends it again after restarting; the webhook body's ``id`` and the
email's ``Message-ID`` let a receiver drop the repeat.

Each channel is retried on its own: a row remembers which channels got it
(``email_done``, ``webhook_done``), so a webhook that fails does not send the email twice.
A failure waits ``retry_delay(attempts)`` (doubling, capped); an alert still undelivered
``give_up_after`` its creation is marked ``expired`` and logged as an error.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from typing import Awaitable, Callable

import httpx
import orjson
import trio
from prometheus_client import CollectorRegistry, Counter

from gatewayd import mail
from gatewayd.alerts import SIGNATURE_HEADER, AlertSettings, Message, SmtpSettings, WebhookSettings, compose, sign
from gatewayd.directory import Directory
from gatewayd.store.alert_outbox import OutboxRow
from gatewayd.store.base import StoreError, utc_iso
from gatewayd.store.contract import Store

log = logging.getLogger("gatewayd.alerts")

CLAIM_BATCH = 20
KEEP_FINISHED_S = 30 * 86400  # finished rows are deleted after this


class ChannelFailed(Exception):
    """One channel could not deliver (the receiver's answer or the network); retried later."""


def deliveries_counter(registry: CollectorRegistry) -> Counter:
    return Counter("gateway_alert_deliveries", "Alert delivery attempts, by channel and outcome (ok, failed, expired).",
                   ["channel", "outcome"], registry=registry)


async def send_email(settings: SmtpSettings, to: str, message: Message, alert_id: int) -> None:
    """One alert over SMTP (``gatewayd.mail``), its id in a header for the receiver."""
    try:
        await mail.send(settings, to, message.subject, message.text, ident=f"alert-{alert_id}",
                        headers={"X-Gatewayd-Alert-Id": str(alert_id)})
    except mail.MailFailed as e:
        raise ChannelFailed(str(e)) from None


async def send_webhook(settings: WebhookSettings, client: httpx.AsyncClient, message: Message) -> None:
    """POST the JSON body, signed; any 2xx is delivered."""
    body = orjson.dumps(message.doc)
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(settings.secret, body, int(time.time())),
               "User-Agent": "gatewayd-alerts"}
    try:
        response = await client.post(settings.url, content=body, headers=headers, timeout=settings.timeout_s)
    except httpx.HTTPError as e:
        raise ChannelFailed(f"webhook: {type(e).__name__}: {e}") from None
    if not 200 <= response.status_code < 300:
        raise ChannelFailed(f"webhook: answered {response.status_code}")


class AlertDeliverer:
    """The task's state: the store, the directory (names and emails), the current settings."""

    def __init__(self, store: Store, directory: Directory, settings: Callable[[], AlertSettings | None],
                 registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.directory = directory
        self.settings = settings  # read on every round: a reload takes effect at once
        self.clock = clock
        self.counter = deliveries_counter(registry)
        self.token = f"{store.instance_id}:{secrets.token_hex(4)}"

    async def run(self) -> None:
        """Forever; a database that does not answer is waited for, never a reason to stop."""
        last_prune = 0.0
        async with httpx.AsyncClient(follow_redirects=False) as client:
            while True:
                settings = self.settings()
                if settings is None:
                    await trio.sleep(5.0)
                    continue
                try:
                    claimed = await self.deliver_due(settings, client)
                    if self.clock() - last_prune > 3600:
                        last_prune = self.clock()
                        await self.store.forget_finished_alerts(utc_iso(
                            dt.datetime.fromtimestamp(last_prune - KEEP_FINISHED_S, dt.timezone.utc)))
                except StoreError as e:
                    log.warning("alerts: the store did not answer (%s); trying again", e)
                    claimed = 0
                if claimed < CLAIM_BATCH:
                    await trio.sleep(settings.poll_s)

    async def deliver_due(self, settings: AlertSettings, client: httpx.AsyncClient) -> int:
        """Claim one batch of due rows and deliver each; returns how many were claimed."""
        rows = await self.store.claim_alerts(now=self.clock(), lease_s=settings.lease_s, token=self.token,
                                             limit=CLAIM_BATCH)
        for row in rows:
            await self.deliver(row, settings, client)
        return len(rows)

    async def deliver(self, row: OutboxRow, settings: AlertSettings, client: httpx.AsyncClient) -> None:
        created = dt.datetime.fromisoformat(row.created_at.replace("Z", "+00:00")).timestamp()
        if self.clock() - created > settings.give_up_after_s:
            self.counter.labels("all", "expired").inc()
            log.error("alert %d (%s, account %s) expired undelivered after %d attempts; last error: %s",
                      row.id, row.kind, row.account_id, row.attempts, row.last_error)
            await self.store.finish_alert(row.id, self.token, outcome="expired", email_done=row.email_done,
                                          webhook_done=row.webhook_done, error=row.last_error)
            return
        account = self.directory.accounts.get(row.account_id)
        key = self.directory.keys.get(row.key_id) if row.key_id else None
        message = compose(row, account, key)
        email_done, webhook_done = row.email_done, row.webhook_done
        errors: list[str] = []
        if settings.smtp is not None and not email_done:
            if account is None:  # the account is gone: there is nobody to write to
                email_done = True
            else:
                email_done = await self._attempt(row, "email", send_email(settings.smtp, account.email, message,
                                                                          row.id), errors)
        if settings.webhook is not None and not webhook_done:
            webhook_done = await self._attempt(row, "webhook", send_webhook(settings.webhook, client, message), errors)
        if not errors:
            await self.store.finish_alert(row.id, self.token, outcome="delivered", email_done=email_done,
                                          webhook_done=webhook_done)
            return
        delay = settings.retry_delay(row.attempts + 1)
        await self.store.retry_alert(row.id, self.token, next_attempt_at=self.clock() + delay, email_done=email_done,
                                     webhook_done=webhook_done, error="; ".join(errors))

    async def _attempt(self, row: OutboxRow, channel: str, sending: Awaitable[None], errors: list[str]) -> bool:
        """Await one channel's delivery, log it and count it; True when delivered."""
        fields = {"alert_id": row.id, "kind": row.kind, "account_id": row.account_id, "channel": channel,
                  "attempt": row.attempts + 1}
        try:
            await sending
        except ChannelFailed as e:
            self.counter.labels(channel, "failed").inc()
            log.warning("alert %d: %s delivery failed (attempt %d): %s", row.id, channel, row.attempts + 1, e,
                        extra={"fields": {**fields, "outcome": "failed", "error": str(e)}})
            errors.append(str(e))
            return False
        self.counter.labels(channel, "ok").inc()
        log.info("alert %d: delivered by %s (attempt %d)", row.id, channel, row.attempts + 1,
                 extra={"fields": {**fields, "outcome": "ok"}})
        return True
