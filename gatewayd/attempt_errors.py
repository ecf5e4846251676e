"""What ends one attempt at a route: the provider's bad answer, and ``AttemptFailed``.

Shared by the relay (which tries the next route) and the stream pump (which raises them
before a stream's first byte); here rather than in ``gatewayd.relay`` so the pump need not
import the relay that imports it.
"""

from __future__ import annotations

import orjson

from gatewayd.billing.tab import Outcome
from gatewayd.errors import GatewayError, UpstreamError
from gatewayd.formats.errors import InvalidAnswer

# What counts as the provider's bad answer (a 502): JSON that does not parse (or a body that
# is not SSE, whose first event then does not parse), and the few shape checks made on
# purpose (InvalidAnswer). Every other exception from a route's callbacks or a pipe is a
# bug in gatewayd: a 500 ``internal_error``, logged with its traceback.
PROVIDER_FAULTS = (orjson.JSONDecodeError, InvalidAnswer)


class AttemptFailed(Exception):
    """One route failed before any byte reached the client: another route may serve the request.

    ``error`` is what the client gets if this was the last attempt (``upstream`` instead
    when the provider answered with an error status); ``usage_status`` names the fault in
    the usage row; ``reached`` says whether the provider answered at all.
    """

    def __init__(self, error: GatewayError | None, usage_status: str, *, reason: str,
                 upstream: UpstreamError | None = None, retryable: bool = True,
                 retry_after_s: float | None = None, reached: bool = True) -> None:
        super().__init__(reason)
        self.error = error
        self.outcome = Outcome(usage_status)
        self.reason = reason
        self.upstream = upstream
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.reached = reached or upstream is not None
