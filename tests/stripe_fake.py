"""A loopback fake of the part of Stripe's HTTP API gatewayd calls, and Stripe's side of webhooks.

Stripe is the edge the tests cannot reach, so this small real HTTP server answers what
the official ``stripe`` library sends (form-encoded bodies, ``Authorization: Bearer``,
``Idempotency-Key``), in Stripe's shapes: ``POST /v1/checkout/sessions``,
``GET /v1/payment_intents/{id}``, ``GET /v1/refunds?charge=``. An idempotency key seen
again answers the first response (and 400 ``idempotency_error`` with other parameters),
as Stripe does. The test plays the card holder (``pay``) and Stripe's dashboard
(``refund``, ``dispute``), and ``signed`` makes a delivery signed with the library's
own scheme (``stripe.WebhookSignature``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import stripe

SECRET_KEY = "sk_test_gatewayd_fake"
WEBHOOK_SECRET = "whsec_gatewayd_fake"


def _id(prefix: str) -> str:
    return f"{prefix}_test_{os.urandom(10).hex()}"


def _nested(params: list[tuple[str, str]], prefix: str) -> dict[str, str]:
    """``metadata[a]=1`` -> ``{"a": "1"}`` for one bracketed prefix."""
    out = {}
    for key, value in params:
        if key.startswith(prefix + "[") and key.endswith("]") and key.count("[") == prefix.count("[") + 1:
            out[key[len(prefix) + 1:-1]] = value
    return out


class StripeFake:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[str, dict[str, Any]] = {}
        self.intents: dict[str, dict[str, Any]] = {}
        self.charges: dict[str, dict[str, Any]] = {}
        self.refunds: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []  # every request: method, path, params, headers
        self.idempotent: dict[str, tuple[list, int, dict]] = {}
        self.fail_with: int | None = None  # the next API answers: this status (an outage)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                fake._serve(self, "GET")

            def do_POST(self) -> None:
                fake._serve(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the HTTP API ----------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(h.path)
        if method == "GET" and url.path.startswith("/c/pay/"):  # the payment page the browser is sent to
            page = f"<!doctype html><title>Checkout</title><h1 id=checkout>{url.path.rsplit('/', 1)[1]}</h1>".encode()
            h.send_response(200)
            h.send_header("content-type", "text/html")
            h.send_header("content-length", str(len(page)))
            h.end_headers()
            h.wfile.write(page)
            return
        body = h.rfile.read(int(h.headers.get("content-length") or 0)).decode()
        params = urllib.parse.parse_qsl(body if method == "POST" else url.query, keep_blank_values=True)
        with self.lock:
            self.requests.append({"method": method, "path": url.path, "params": params,
                                  "idempotency_key": h.headers.get("idempotency-key"),
                                  "authorization": h.headers.get("authorization")})
            status, doc = self._answer(method, url.path, params, h.headers.get("authorization"),
                                       h.headers.get("idempotency-key"))
        data = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.send_header("request-id", _id("req"))
        h.end_headers()
        h.wfile.write(data)

    def _answer(self, method: str, path: str, params: list, auth: str | None, key: str | None) -> tuple[int, dict]:
        if self.fail_with is not None:
            return self.fail_with, {"error": {"type": "api_error", "message": "the fake is down"}}
        if auth != f"Bearer {SECRET_KEY}":
            return 401, {"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}}
        if method == "POST" and path == "/v1/checkout/sessions":
            if key is not None and key in self.idempotent:
                first_params, status, doc = self.idempotent[key]
                if first_params != params:
                    return 400, {"error": {"type": "idempotency_error",
                                           "message": "Keys for idempotent requests can only be used with the "
                                                      "same parameters they were first used with."}}
                return status, doc
            doc = self._new_session(params)
            if key is not None:
                self.idempotent[key] = (params, 200, doc)
            return 200, doc
        if method == "GET" and path.startswith("/v1/payment_intents/"):
            intent = self.intents.get(path.rsplit("/", 1)[1])
            if intent is None:
                return 404, {"error": {"type": "invalid_request_error", "code": "resource_missing",
                                       "message": "No such payment_intent"}}
            return 200, intent
        if method == "GET" and path == "/v1/refunds":
            charge = dict(params).get("charge")
            data = [r for r in self.refunds.values() if r["charge"] == charge]
            return 200, {"object": "list", "url": "/v1/refunds", "has_more": False, "data": data[::-1]}
        return 404, {"error": {"type": "invalid_request_error", "message": f"Unrecognized request URL ({path})"}}

    def _new_session(self, params: list[tuple[str, str]]) -> dict[str, Any]:
        flat = dict(params)
        session_id = _id("cs")
        unit = int(flat["line_items[0][price_data][unit_amount]"])
        session = {
            "id": session_id, "object": "checkout.session", "mode": flat["mode"], "status": "open",
            "payment_status": "unpaid", "amount_total": unit * int(flat["line_items[0][quantity]"]),
            "currency": flat["line_items[0][price_data][currency]"],
            "client_reference_id": flat.get("client_reference_id"),
            "metadata": _nested(params, "metadata"), "payment_intent": None,
            "success_url": flat["success_url"], "cancel_url": flat["cancel_url"],
            "url": f"{self.url}/c/pay/{session_id}",  # Stripe's page, here: a browser can reach it
            "_intent_metadata": _nested(params, "payment_intent_data[metadata]"),
        }
        self.sessions[session_id] = session
        return {k: v for k, v in session.items() if not k.startswith("_")}

    # -- the card holder and the dashboard ----------------------------------------

    def pay(self, session_id: str) -> dict[str, Any]:
        """The card holder pays: the session completes, paid; its PaymentIntent and charge exist."""
        with self.lock:
            session = self.sessions[session_id]
            intent_id, charge_id = _id("pi"), _id("ch")
            self.intents[intent_id] = {"id": intent_id, "object": "payment_intent", "amount": session["amount_total"],
                                       "currency": session["currency"], "status": "succeeded",
                                       "latest_charge": charge_id, "metadata": session["_intent_metadata"]}
            self.charges[charge_id] = {"id": charge_id, "object": "charge", "amount": session["amount_total"],
                                       "amount_refunded": 0, "currency": session["currency"], "paid": True,
                                       "refunded": False, "payment_intent": intent_id,
                                       "metadata": session["_intent_metadata"]}
            session.update(status="complete", payment_status="paid", payment_intent=intent_id)
            return {k: v for k, v in session.items() if not k.startswith("_")}

    def charge_of(self, session_id: str) -> str:
        return self.intents[self.sessions[session_id]["payment_intent"]]["latest_charge"]

    def refund(self, charge_id: str, cents: int, status: str = "succeeded") -> dict[str, Any]:
        """A (partial) refund made in the dashboard; the charge as ``charge.refunded`` carries it
        (without its refunds list, as since API version 2022-11-15)."""
        with self.lock:
            charge = self.charges[charge_id]
            refund_id = _id("re")
            self.refunds[refund_id] = {"id": refund_id, "object": "refund", "amount": cents, "charge": charge_id,
                                       "currency": charge["currency"], "payment_intent": charge["payment_intent"],
                                       "status": status}
            if status in ("succeeded", "pending"):
                charge["amount_refunded"] += cents
            charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
            return dict(charge)

    def dispute(self, charge_id: str, status: str) -> dict[str, Any]:
        """A dispute of what was not refunded (Stripe's ``amount``: what the card holder disputes)."""
        charge = self.charges[charge_id]
        return {"id": _id("dp"), "object": "dispute", "amount": charge["amount"] - charge["amount_refunded"], "currency": charge["currency"],
                "charge": charge_id, "payment_intent": charge["payment_intent"], "status": status,
                "reason": "fraudulent", "metadata": {}}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"id": _id("evt"), "object": "event", "api_version": "2025-06-30.basil", "created": int(time.time()),
            "type": kind, "livemode": False, "pending_webhooks": 1, "data": {"object": obj}}


def signed(doc: dict[str, Any], *, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> tuple[bytes, dict]:
    """A delivery as Stripe sends it: the body and its ``Stripe-Signature`` header."""
    payload = json.dumps(doc, indent=2)
    header = stripe.WebhookSignature.generate_signature_header(payload, secret, timestamp=timestamp)
    return payload.encode(), {"stripe-signature": header, "content-type": "application/json; charset=utf-8",
                              "user-agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
