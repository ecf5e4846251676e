"""The admin API's OpenAPI 3.1 document (``GET /admin/v1/openapi.json``).

It is also where each route's scope is said (``x-scope`` on each operation): the gate
(``gatewayd.admin.gate``) reads it to decide who may call what, so the document and the
enforcement cannot disagree. ``tests/test_admin_http.py`` checks that every route of the
admin app is in it, and schemathesis (``tests/test_admin_openapi_live.py``) that a live
daemon answers as it says.

Money: every ``*_nano`` integer (nano-dollars, 1e-9 USD) has a ``*_usd`` decimal string
beside it in answers. Prices' ``*_usd`` are USD per 1,000,000 tokens (a tool: per call).
"""

from __future__ import annotations

import functools
from typing import Any

from gatewayd.admin.tokens import ADMIN, KEYS, MONEY, READ, SCOPES, WRITE

NULLABLE_INT = {"type": ["integer", "null"]}
NULLABLE_STR = {"type": ["string", "null"]}
INT64 = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}

ERROR = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type", "code"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"}}}},
}
ACCOUNT = {
    "type": "object",
    "required": ["id", "email", "name", "timezone", "balance_nano", "held_nano", "total_paid_nano", "groups"],
    "properties": {
        "id": {"type": "string"}, "email": {"type": "string"}, "name": {"type": "string"},
        "timezone": {"type": "string"}, "balance_nano": {"type": "integer"}, "balance_usd": {"type": "string"},
        "held_nano": {"type": "integer"}, "total_paid_nano": {"type": "integer"},
        "total_paid_usd": {"type": "string"}, "groups": {"type": "array", "items": {"type": "string"}},
        "embedding_models": {"type": "array", "items": {"type": "string"}}, "created_at": {"type": "string"},
        "has_password": {"type": "boolean"}, "max_concurrent": NULLABLE_INT, "alert_below_nano": NULLABLE_INT,
    },
}
KEY = {
    "type": "object", "required": ["id", "account_id", "name", "state", "spend_limit_nano", "spent_nano"],
    "properties": {
        "id": {"type": "string"}, "account_id": {"type": "string"}, "name": {"type": "string"},
        "state": {"enum": ["enabled", "disabled", "expired", "used_up", "deleted", "over_budget"]},
        "spend_limit_nano": NULLABLE_INT, "spent_nano": {"type": "integer"}, "expires_on": NULLABLE_STR,
        "models": {"type": ["array", "null"], "items": {"type": "string"}},
        "allow_ips": {"type": ["array", "null"], "items": {"type": "string"}}, "group": NULLABLE_STR,
        "created_at": {"type": "string"}, "last_used_at": NULLABLE_STR, "secret": {"type": "string"},
    },
}
PAYMENT = {
    "type": "object", "required": ["id", "account_id", "amount_nano", "note", "created_at", "source"],
    "properties": {"id": {"type": "integer"}, "account_id": {"type": "string"}, "amount_nano": {"type": "integer"},
                   "amount_usd": {"type": "string"}, "note": {"type": "string"}, "created_at": {"type": "string"},
                   "source": {"enum": ["operator", "code", "card", "refund", "dispute", "adjustment"]},
                   "reference": NULLABLE_STR},
}
BALANCE = {"type": "object", "required": ["balance_nano", "held_nano", "total_paid_nano"],
           "properties": {"balance_nano": {"type": "integer"}, "held_nano": {"type": "integer"},
                          "total_paid_nano": {"type": "integer"}, "balance_usd": {"type": "string"}}}
CODE = {"type": "object", "required": ["id", "hint", "amount_nano", "status"],
        "properties": {"id": {"type": "string"}, "hint": {"type": "string"}, "amount_nano": {"type": "integer"},
                       "status": {"enum": ["unused", "redeemed", "revoked", "expired"]}, "code": {"type": "string"},
                       "expires_at": NULLABLE_STR, "redeemed_by": NULLABLE_STR}}
TOKEN = {"type": "object", "required": ["id", "name", "scopes", "state", "created_at"],
         "properties": {"id": {"type": "string"}, "name": {"type": "string"},
                        "scopes": {"type": "array", "items": {"enum": list(SCOPES)}},
                        "allow_ips": {"type": ["array", "null"], "items": {"type": "string"}},
                        "expires_at": NULLABLE_STR, "revoked_at": NULLABLE_STR, "last_used_at": NULLABLE_STR,
                        "state": {"enum": ["active", "revoked", "expired"]},
                        "token": {"type": "string", "pattern": "^gwa-"}}}
AUDIT_ENTRY = {"type": "object", "required": ["id", "at", "actor", "actor_name", "via", "method", "path", "status"],
               "properties": {"id": {"type": "integer"}, "at": {"type": "string"}, "actor": {"type": "string"},
                              "actor_name": {"type": "string"}, "via": {"enum": ["socket", "http", "console"]},
                              "address": NULLABLE_STR, "method": {"type": "string"}, "path": {"type": "string"},
                              "status": {"type": "integer"}, "target": NULLABLE_STR, "request": {},
                              "before": {}, "after": {}}}
PRICE = {"type": "object", "required": ["model", "kind", "fields", "sources"],
         "properties": {"model": {"type": "string"}, "kind": {"type": "string"}, "fields": {"type": "object"},
                        "sources": {"type": "object"}}}
ROUTE = {"type": "object", "required": ["model", "route", "provider", "state"],
         "properties": {"model": {"type": "string"}, "route": {"type": "string"}, "provider": {"type": "string"},
                        "state": {"type": "string"}}}
OBJECT = {"type": "object"}


def _list(items: dict, **more: Any) -> dict:
    return {"type": "object", "required": ["data"],
            "properties": {"data": {"type": "array", "items": items}, **more}}


def _path_param(name: str, description: str, *, slashes: bool = False) -> dict:
    param = {"name": name, "in": "path", "required": True, "description": description,
             "schema": {"type": "string", "minLength": 1}}
    if slashes:
        param["x-slashes"] = True  # a model id may hold '/' (the gate's route match)
    return param


def _query(name: str, description: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


ACCOUNT_PARAM = _path_param("account", "An account id or email.")
KEY_PARAM = _path_param("key", "A key id.")
MODEL_PARAM = _path_param("model", "A catalogue model id.", slashes=True)
RANGE = [_query("since", "From this day (YYYY-MM-DD, in the account's zone) or ISO 8601 instant."),
         _query("until", "To the end of this day, or this ISO 8601 instant (exclusive).")]
USAGE_FILTERS = [_query("key", "Only this key's rows."), _query("model", "Only this model."),
                 _query("status", "Only rows of this status (ok, error, cancelled, interrupted, ...)."), *RANGE]
KEY_BODY = {"type": "object", "additionalProperties": False, "properties": {
    "name": {"type": "string"}, "spend_limit_nano": NULLABLE_INT, "expires_on": NULLABLE_STR,
    "models": {"type": ["array", "null"], "items": {"type": "string"}},
    "allow_ips": {"type": ["array", "null"], "items": {"type": "string"}}, "group": NULLABLE_STR,
    "max_concurrent": NULLABLE_INT, "budget_nano": NULLABLE_INT,
    "budget_period": {"type": ["string", "null"], "enum": ["day", "week", "month", None]},
    "force": {"type": "boolean", "description": "Accept an expires_on that has passed already (refused otherwise)."}}}

STANDARD_ERRORS = {
    "400": "The request is not acceptable; the message names the field.",
    "401": "No admin token, or one that is unknown, revoked or expired, or an API key.",
    "403": "The token lacks the scope this route needs, or is not allowed from this address.",
    "404": "No such account, key, code, model or token.",
    "413": "The request body is over [admin] max_body_bytes.",
    "429": "Too many calls for this token; see Retry-After.",
    "503": "The admin API is holding too many request bodies, or the store is unreachable.",
}


def _operation(scope: str, summary: str, response: dict, *, status: str = "200", body: dict | None = None,
               params: list | None = None, errors: tuple[str, ...] = ()) -> dict:
    op: dict[str, Any] = {"summary": summary, "x-scope": scope, "security": [{"adminToken": []}],
                          "description": f"Scope: `{scope}`." + ("" if scope == READ else " Written to the audit log "
                                                                 "with the target's state before and after."),
                          "responses": {status: {"description": "Done.",
                                                 "content": {"application/json": {"schema": response}}}}}
    for code in ("400", "401", "403", "404", "413", "429", "503", *errors):
        op["responses"][code] = {"description": STANDARD_ERRORS.get(code, "Refused; the message says why."),
                                 "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    op["responses"]["default"] = {"description": "Any other refusal, in the same envelope.",
                                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


def _body(required: list[str], **properties: dict) -> dict:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties}


@functools.cache
def document() -> dict:
    """The document (built once: it describes code, not data)."""
    op = _operation  # a short name keeps the table below readable
    money_body = _body(["amount_nano"], amount_nano={"type": "integer", "minimum": 1},
                       note={"type": "string", "maxLength": 500})
    paths: dict[str, dict] = {
        "/admin/v1/accounts": {
            "get": op(READ, "List accounts with their balances", _list(ACCOUNT), params=[
                _query("q", "Only accounts whose email, name or id holds this (any case)."),
                _query("limit", "At most this many (by email).", {"type": "integer"})]),
            "post": op(WRITE, "Create an account", ACCOUNT, status="201", errors=("409",), body=_body(
                ["email"], email={"type": "string"}, name={"type": "string"}, timezone={"type": "string"},
                password={"type": "string"})),
        },
        "/admin/v1/invitations": {
            "post": op(WRITE, "Invite an email to sign up in the console (the link is in this answer, and emailed "
                              "when mail is set up)",
                       {"type": "object", "required": ["email", "link", "emailed"],
                        "properties": {"email": {"type": "string"}, "link": {"type": "string"},
                                       "emailed": {"type": "boolean"}, "expires_in_s": {"type": "number"}}},
                       status="201", errors=("409",), body=_body(["email"], email={"type": "string"})),
        },
        "/admin/v1/accounts/{account}": {
            "parameters": [ACCOUNT_PARAM],
            "get": op(READ, "Show an account", ACCOUNT),
            "patch": op(WRITE, "Change an account's name, zone, concurrency cap or balance alert", ACCOUNT,
                       body=_body([], name={"type": "string"}, timezone={"type": "string"},
                                  max_concurrent=NULLABLE_INT, alert_below_nano=NULLABLE_INT)),
        },
        "/admin/v1/accounts/{account}/password": {
            "parameters": [ACCOUNT_PARAM],
            "put": op(WRITE, "Set an account's console password", ACCOUNT, body=_body(["password"],
                                                                                      password={"type": "string"})),
        },
        "/admin/v1/accounts/{account}/unlock": {
            "parameters": [ACCOUNT_PARAM],
            "post": op(WRITE, "Lift the console's sign-in lockouts of an account's email, at every address",
                       {"type": "object", "required": ["account", "buckets_cleared"],
                        "properties": {"account": ACCOUNT, "buckets_cleared": {"type": "integer"}}}),
        },
        "/admin/v1/accounts/{account}/payments": {
            "parameters": [ACCOUNT_PARAM],
            "get": op(READ, "List an account's payments, newest first", _list(PAYMENT)),
            "post": op(MONEY, "Record a payment (balance and total paid)",
                      {"type": "object", "required": ["account", "payment"],
                       "properties": {"account": ACCOUNT, "payment": PAYMENT}}, status="201", body=money_body),
        },
        "/admin/v1/accounts/{account}/adjustments": {
            "parameters": [ACCOUNT_PARAM],
            "post": op(MONEY, "Adjust a balance up or down, with the reason",
                      {"type": "object", "required": ["account", "adjustment"],
                       "properties": {"account": ACCOUNT, "adjustment": PAYMENT}}, status="201",
                      body=_body(["amount_nano", "note"], amount_nano={"type": "integer"},
                                 note={"type": "string", "minLength": 1, "maxLength": 500},
                                 force={"type": "boolean", "description": "Allow a debit below a zero balance "
                                        "(refused otherwise: 409 below_floor)."})),
        },
        "/admin/v1/accounts/{account}/groups": {
            "parameters": [ACCOUNT_PARAM],
            "put": op(WRITE, "Set the groups an account may use", ACCOUNT,
                     body=_body(["groups"], groups={"type": "array", "items": {"type": "string"}})),
        },
        "/admin/v1/accounts/{account}/embeddings/{model}": {
            "parameters": [ACCOUNT_PARAM, MODEL_PARAM],
            "put": op(WRITE, "Enable or disable an embedding model for an account", ACCOUNT,
                     body=_body(["enabled"], enabled={"type": "boolean"})),
        },
        "/admin/v1/accounts/{account}/keys": {
            "parameters": [ACCOUNT_PARAM],
            "get": op(READ, "List an account's API keys", _list(KEY)),
            "post": op(KEYS, "Create an API key (its secret is in this answer only)", KEY, status="201",
                      body=KEY_BODY, errors=("409",)),
        },
        "/admin/v1/accounts/{account}/balance": {
            "parameters": [ACCOUNT_PARAM], "get": op(READ, "An account's balance", BALANCE),
        },
        "/admin/v1/accounts/{account}/usage": {
            "parameters": [ACCOUNT_PARAM],
            "get": op(READ, "An account's usage rows, newest first",
                     _list(OBJECT, next_before=NULLABLE_INT),
                     params=[*USAGE_FILTERS, _query("limit", "Rows a page (1-10000).", {"type": "integer"}),
                             _query("before", "Page on: next_before of the previous page.", {"type": "integer"})]),
        },
        "/admin/v1/keys/{key}": {
            "parameters": [KEY_PARAM],
            "get": op(READ, "Show an API key", KEY),
            "patch": op(KEYS, "Change an API key", KEY, body=KEY_BODY, errors=("409",)),
        },
        **{f"/admin/v1/keys/{{key}}/{action}": {
            "parameters": [KEY_PARAM],
            "post": op(KEYS, f"{action.capitalize()} an API key", KEY, errors=("409",)),
        } for action in ("disable", "enable", "revoke")},
        "/admin/v1/report": {
            "get": op(READ, "Requests, tokens and cost per model and per key over a range", OBJECT,
                     params=[_query("account", "One account (id or email); all when absent."), *USAGE_FILTERS]),
        },
        "/admin/v1/audit": {"get": op(READ, "Check the ledger's invariant from the stored rows", OBJECT)},
        "/admin/v1/routes": {"get": op(READ, "Every model route and its health on this instance (or every one)",
                                       _list(ROUTE), params=[_query(
                                           "instances", "all: every instance's routes, each with its instance, "
                                           "host and reported_at (PostgreSQL); absent: this instance's.",
                                           {"enum": ["all"]})])},
        "/admin/v1/reload": {"post": op(WRITE, "Re-read the config file (as SIGHUP does)", OBJECT,
                                       errors=("501",))},
        "/admin/v1/prices": {
            "get": op(READ, "Every model's prices and where each came from",
                     _list(PRICE, prices_file={"type": "string"})),
            "post": op(WRITE, "Set price fields (the prices file) and reload", OBJECT, errors=("501",), body={
                "type": "object", "additionalProperties": False, "required": ["models"],
                "properties": {"models": {"type": "object", "additionalProperties": {
                    "type": "object", "additionalProperties": {"type": "integer"}}}}}),
        },
        "/admin/v1/prices/{model}": {
            "parameters": [MODEL_PARAM],
            "get": op(READ, "One model's prices", PRICE),
            "delete": op(WRITE, "Drop a model's fields from the prices file and reload", OBJECT, errors=("501",)),
        },
        "/admin/v1/codes": {
            "get": op(READ, "List redemption codes", _list(CODE)),
            "post": op(MONEY, "Create redemption codes (each code is in this answer only)", _list(CODE),
                      status="201", body=_body(["amount_nano"], amount_nano={"type": "integer", "minimum": 1},
                                               count={"type": "integer", "minimum": 1},
                                               expires_at=NULLABLE_STR, note=NULLABLE_STR)),
        },
        "/admin/v1/codes/{code}/revoke": {
            "parameters": [_path_param("code", "A code's id.")],
            "post": op(MONEY, "Revoke an unused code", CODE, errors=("409",)),
        },
        "/admin/v1/admin-tokens": {
            "get": op(ADMIN, "List admin tokens (never their secrets)", _list(TOKEN)),
            "post": op(ADMIN, "Create an admin token (its secret is in this answer only)", TOKEN, status="201",
                      body=_body(["name", "scopes"], name={"type": "string"},
                                 scopes={"type": "array", "items": {"enum": list(SCOPES)}, "minItems": 1},
                                 expires_at=NULLABLE_STR,
                                 allow_ips={"type": ["array", "null"], "items": {"type": "string"}})),
        },
        "/admin/v1/admin-tokens/{token}": {
            "parameters": [_path_param("token", "An admin token's id (adm_...).")],
            "get": op(ADMIN, "Show an admin token", TOKEN),
        },
        "/admin/v1/admin-tokens/{token}/revoke": {
            "parameters": [_path_param("token", "An admin token's id (adm_...).")],
            "post": op(ADMIN, "Revoke an admin token (at once, on every instance)", TOKEN),
        },
        "/admin/v1/audit-log": {
            "get": op(READ, "The admin audit log, newest first", _list(AUDIT_ENTRY, next_before=NULLABLE_INT), params=[
                _query("actor", "Only this actor (a token id, socket or operator)."),
                _query("target", "Only this target (account:ID, key:ID, prices:MODEL, ...)."),
                _query("changes", "true: only changes (no reads).", {"enum": ["true", "false"]}),
                _query("since", "From this day (UTC) or ISO 8601 instant."),
                _query("until", "To the end of this day (UTC) or this ISO 8601 instant."),
                _query("limit", "Entries a page (1-1000).", {"type": "integer"}),
                _query("before", "Page on: next_before of the previous page.", {"type": "integer"})]),
        },
        "/admin/v1/operator/password": {
            "put": op(ADMIN, "Set the operator's console password", OBJECT,
                     body=_body(["password"], password={"type": "string", "minLength": 12})),
        },
        "/admin/v1/me": {"get": op(READ, "Who the caller is: token id, name and scopes", OBJECT)},
        "/admin/v1/openapi.json": {"get": op(READ, "This document", OBJECT)},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "gatewayd admin API", "version": "1",
                 "description": "The operator's API: the same on the admin Unix socket (the local operator, every "
                                "scope) and over HTTP with an admin token. Scopes: read (every GET); write "
                                "(accounts, groups, prices, reload); keys (any account's API keys); money "
                                "(payments, adjustments, redemption codes); admin (admin tokens, the operator "
                                "password, and every other scope). Every call is written to the audit log."},
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR},
            "securitySchemes": {"adminToken": {"type": "http", "scheme": "bearer",
                                               "description": "An admin token, gwa-... (gatewayctl admin-token "
                                                              "create)."}},
        },
        "security": [{"adminToken": []}],
    }
