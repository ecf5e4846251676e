"""Loopback receivers for alert tests: a real SMTP server (aiosmtpd) and a webhook endpoint that
verifies each request's signature the way docs/funding.md tells a receiver to."""

from __future__ import annotations

import json
import threading
import time
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from aiosmtpd.controller import Controller

from gatewayd.alerts import SIGNATURE_HEADER, verify
from tests.live import free_port


class SmtpSink:
    """An SMTP server on 127.0.0.1 keeping every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.lock = threading.Lock()
        sink = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
                with sink.lock:
                    sink.messages.append(message_from_bytes(envelope.original_content or envelope.content))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def to(self, address: str) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if m["To"] == address]

    def stop(self) -> None:
        self.controller.stop()


class WebhookSink:
    """An HTTP endpoint on 127.0.0.1: answers 401 to a bad signature, ``fail_next`` times 500, else 200."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.fail_next = 0
        self.attempts: list[dict[str, Any]] = []  # every request: {"id", "status", "body"}
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                signed = verify(sink.secret, body, self.headers.get(SIGNATURE_HEADER, ""), time.time())
                doc = json.loads(body) if signed else None
                with sink.lock:
                    if not signed:
                        status = 401
                    elif sink.fail_next > 0:
                        sink.fail_next -= 1
                        status = 500
                    else:
                        status = 200
                    sink.attempts.append({"id": doc and doc["id"], "status": status, "body": doc})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self, match: Callable[[dict[str, Any]], bool] = lambda doc: True) -> list[dict[str, Any]]:
        """The bodies answered 200 that ``match``."""
        with self.lock:
            return [a["body"] for a in self.attempts if a["status"] == 200 and match(a["body"])]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alerts_config(smtp: SmtpSink | None, webhook: WebhookSink | None, *, poll_s: float = 0.1,
                  retry_initial_s: float = 0.2) -> str:
    """The ``[alerts]`` tables pointing at the sinks (the webhook secret is in ALERT_SECRET)."""
    text = f"\n[alerts]\npoll_s = {poll_s}\nretry_initial_s = {retry_initial_s}\nretry_max_s = 2\n"
    if smtp is not None:
        text += f'[alerts.smtp]\nhost = "127.0.0.1"\nport = {smtp.port}\nfrom = "alerts@gateway.test"\nstarttls = false\n'
    if webhook is not None:
        text += f'[alerts.webhook]\nurl = "{webhook.url}"\nsecret_env = "ALERT_SECRET"\n'
    return text
