"""schemathesis against a live daemon's admin API over HTTP, from the document it serves
(``GET /admin/v1/openapi.json``): for every operation, calls made from the document's
parameters and bodies (a few each, so the run stays short) must never get a 500, and every
answer must match the document (status listed, JSON, body schema).

The document's path parameters are given examples naming things that exist (an account, a
key, a code, a model, a token), so the calls reach the routes' work and not only their 404s.
The daemon is this test's own: the calls change accounts, prices and tokens."""

from __future__ import annotations

import copy
import itertools

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.live import Daemon

MAX_EXAMPLES = 3  # per operation and mode: ~40 operations, the whole run ~15 s
# valid calls, and calls the document says are wrong (each must be refused with a documented 4xx)
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _with_examples(document: dict, examples: dict[str, str]) -> dict:
    """The document with an example for each path parameter named in ``examples``."""
    doc = copy.deepcopy(document)
    for item in doc["paths"].values():
        for holder in [item, *(op for m, op in item.items() if m in ("get", "post", "put", "patch", "delete"))]:
            for param in holder.get("parameters", []):
                if param.get("in") == "path" and param["name"] in examples:
                    param["example"] = examples[param["name"]]
    return doc


@pytest.mark.live
@pytest.mark.slow
def test_every_operation_answers_as_its_document_says_and_never_500(tmp_path, sim):
    daemon = Daemon(tmp_path / "d", sim.url, extra="[admin]\nrequests_per_minute = 100000\n")
    try:
        admin = daemon.admin
        token = admin.call("POST", "/admin-tokens", {"name": "schemathesis", "scopes": ["admin"]})["token"]
        account = admin.account("schemathesis@example.com")
        key = admin.key(account["id"], "st")
        code = admin.call("POST", "/codes", {"amount_nano": 10**9})["data"][0]
        tokens = admin.call("GET", "/admin-tokens")["data"]
        auth = {"authorization": f"Bearer {token}"}
        served = httpx.get(daemon.url + "/admin/v1/openapi.json", headers=auth, timeout=30)
        assert served.status_code == 200
        document = _with_examples(served.json(), {"account": account["id"], "key": key["id"], "code": code["id"],
                                                   "model": "gpt-4.1-mini", "token": tokens[0]["id"]})
        schema = schemathesis.openapi.from_dict(document)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 35
        for operation, mode in itertools.product(operations, MODES):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            def call(case):
                case.call_and_validate(base_url=daemon.url, headers=auth, checks=CHECKS)

            call()
        # the daemon logged no traceback (a 500 the checks missed, a failure inside the gate)
        assert "Traceback" not in daemon.output.text, daemon.output.text[-3000:]
        calls = admin.call("GET", "/audit-log?limit=1000&actor=" + tokens[0]["id"])["data"]
        assert len(calls) >= len(operations), len(calls)  # the calls were made, and audited
        assert admin.audit()["ok"]
    finally:
        daemon.stop()
