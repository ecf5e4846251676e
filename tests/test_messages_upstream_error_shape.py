"""Provider errors on /v1/messages always reach the client in the messages error shape.

The simulator only answers errors in Anthropic's own shape (passed through byte for
byte, shown live in test_messages_errors_live.py); a proxy in front of a provider can
answer an HTML page or another vendor's JSON, which this checks on plain data.
"""

from __future__ import annotations

import orjson
import pytest

from gatewayd.providers.anthropic import messages_passthrough_error
from gatewayd.errors import UpstreamError


def test_messages_shaped_body_passes_through_unchanged_with_retry_after():
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"r1"}'
    status, out, headers = messages_passthrough_error(UpstreamError(529, body, {"retry-after": "3", "x-other": "1"}))
    assert (status, out, headers) == (529, body, {"retry-after": "3"})


@pytest.mark.parametrize("status,body,kind,message", [
    (502, b"<html><body>Bad Gateway</body></html>", "api_error", "<html><body>Bad Gateway</body></html>"),
    (503, b"", "overloaded_error", "upstream answered 503"),
    (429, b'{"error":{"message":"slow down","type":"rate_limit"}}', "rate_limit_error", "slow down"),
    (404, b'{"error":"no such route"}', "not_found_error", "no such route"),
    (418, b"teapot", "invalid_request_error", "teapot"),
])
def test_other_bodies_are_retold_in_the_messages_shape(status, body, kind, message):
    got_status, out, _ = messages_passthrough_error(UpstreamError(status, body, {}))
    assert got_status == status
    assert orjson.loads(out) == {"type": "error", "error": {"type": kind, "message": message}}
