"""gatewayctl: the operator's command line for a running gatewayd.

Every command is one or two calls to the admin API on gatewayd's Unix socket.
Each prints a rich table for people, or with ``--json`` exactly one JSON
document on stdout for scripts: the API's object, or for a list the ``data``
array itself. ``--socket`` and ``--json`` go before the command or after it
(``gatewayctl --json key list ACCOUNT`` and ``gatewayctl key list ACCOUNT
--json``), as kubectl and docker users type them; given in both places, the
one after the command wins.

Exit status: 0 done; 1 the daemon could not be reached, refused the request,
or (``audit``) found a problem; 2 the command line itself was wrong, including
a dollar amount, date or IP network that does not parse (and a price list
that ``prices import`` cannot read).

Money on the command line is US dollars as decimal text (``10.50``); it is
converted exactly to integer nano-dollars before it is sent.
"""

from __future__ import annotations

# each command module registers its commands on the app when imported, in the order of --help
from gatewayctl import accounts, keys, usage, operations, prices, codes, operators  # noqa: F401
from gatewayctl.common import app


def main() -> None:
    app(prog_name="gatewayctl")


__all__ = ["app", "main"]
