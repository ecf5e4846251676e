"""What one attempt's failure is, and what counts as the provider's fault.

Shared by the attempts loop (:mod:`gatewayd.failover`) and the stream pump
(:mod:`gatewayd.pump`), which both turn a route's failure before any byte reached the client
into an :class:`AttemptFailed` for the next route.
"""

from __future__ import annotations

from gatewayd.billing.tab import Outcome
from gatewayd.errors import GatewayError, UpstreamError
from gatewayd.formats.errors import InvalidAnswer

# The provider's bad answer (a 502): InvalidAnswer, raised at the one boundary where provider
# bytes are parsed (gatewayd.formats.errors.provider_json) and by the few shape checks made
# on purpose. Every other exception from a route's callbacks or a pipe is a bug in gatewayd:
# a 500 ``internal_error``, logged with its traceback.
PROVIDER_FAULTS = (InvalidAnswer,)


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
        # the provider refused the gateway's own credentials (401/403): the operator's to fix
        self.misconfigured = upstream is not None and upstream.status in (401, 403)
        self.retry_after_s = retry_after_s
        self.reached = reached or upstream is not None
