"""Email over SMTP (``[alerts.smtp]``): one function that sends a message, and a small outbox.

``send`` is the one place that speaks SMTP (alerts use it, and the console's sign-up and
reset links). smtplib blocks, so it runs in a worker thread.

``Outbox`` sends the console's link emails from a task of the daemon, not from the page's
handler: the page answers at once and the same way whether or not a message went out, so
neither the answer nor its timing tells a visitor which emails have an account. The queue
is bounded; a message that finds it full is dropped and logged (the visitor may ask again:
the throttle counts the asking, not the sending).
"""

from __future__ import annotations

import logging
import secrets
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Callable

import attrs
import trio

from gatewayd.alerts import SmtpSettings

log = logging.getLogger("gatewayd.mail")


class MailFailed(Exception):
    """The mail server refused the message or could not be reached."""


async def send(settings: SmtpSettings, to: str, subject: str, text: str, *, ident: str,
               headers: dict[str, str] | None = None) -> None:
    """One plain-text message; ``ident`` goes into its Message-ID (a receiver drops repeats by it)."""
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = settings.sender, to, subject
    mail["Date"] = formatdate(localtime=False)
    mail["Message-ID"] = make_msgid(idstring=ident, domain=settings.sender.rsplit("@", 1)[-1])
    for name, value in (headers or {}).items():
        mail[name] = value
    mail.set_content(text + "\n")

    def deliver() -> None:
        with smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout_s) as smtp:
            if settings.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if settings.username is not None and settings.password is not None:
                smtp.login(settings.username, settings.password)
            smtp.send_message(mail)

    try:
        await trio.to_thread.run_sync(deliver)
    except (OSError, smtplib.SMTPException) as e:  # (ssl.SSLError and socket timeouts are OSErrors)
        raise MailFailed(f"smtp {settings.host}:{settings.port}: {type(e).__name__}: {e}") from None


@attrs.frozen
class Letter:
    to: str
    subject: str
    text: str
    kind: str  # for the log and the Message-ID: "signup", "reset", ...


class Outbox:
    """Letters queued by request handlers, sent one at a time by ``run`` (a task of the daemon).
    ``settings`` is read at sending time, so a reload's new mail server applies."""

    def __init__(self, settings: Callable[[], SmtpSettings | None], capacity: int = 256) -> None:
        self._settings = settings
        self._send, self._receive = trio.open_memory_channel[Letter](capacity)
        self.sent = 0
        self.failed = 0
        self.pending = 0  # posted, not yet handled

    def post(self, letter: Letter) -> bool:
        """Queue ``letter``; False (and a log line) when the queue is full."""
        try:
            self._send.send_nowait(letter)
        except trio.WouldBlock:
            log.warning("mail: outbox full, letter dropped", extra={"fields": {"kind": letter.kind}})
            return False
        self.pending += 1
        return True

    async def run(self) -> None:
        async for letter in self._receive:
            try:
                await self._deliver(letter)
            finally:
                self.pending -= 1

    async def _deliver(self, letter: Letter) -> None:
        settings = self._settings()
        if settings is None:
            log.warning("mail: no [alerts.smtp] configured, letter dropped", extra={"fields": {"kind": letter.kind}})
            self.failed += 1
            return
        try:
            await send(settings, letter.to, letter.subject, letter.text, ident=f"{letter.kind}-{secrets.token_hex(8)}")
        except MailFailed as e:
            self.failed += 1
            log.error("mail: not sent", extra={"fields": {"kind": letter.kind, "error": str(e)}})
        else:
            self.sent += 1
            log.info("mail: sent", extra={"fields": {"kind": letter.kind}})

    async def drained(self) -> None:
        """Wait until every posted letter was handled (tests)."""
        while self.pending:
            await trio.sleep(0.01)
