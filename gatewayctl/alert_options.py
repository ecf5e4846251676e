"""``gatewayctl account update --alert-below USD`` / ``--no-alert-below``: the balance below which
the account is alerted (gatewayd/alerts.py; the admin API's ``alert_below_nano``, null: none)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

AlertBelowOpt = Annotated[
    Optional[str],
    typer.Option("--alert-below", metavar="USD",
                 help="Alert the account when its balance falls below this ('none' removes the alert)."),
]
NoAlertBelowOpt = Annotated[bool, typer.Option("--no-alert-below", help="Remove the low-balance alert.")]


def alert_below_field(body: dict[str, Any], value: str | None, remove: bool = False) -> None:
    """Put ``alert_below_nano`` in an API body when either option was given (null: no alert)."""
    from gatewayctl.common import exclusive, parse_usd

    exclusive({"--alert-below": value is not None, "--no-alert-below": remove})
    if remove or (value is not None and value.strip().lower() == "none"):
        body["alert_below_nano"] = None
    elif value is not None:
        body["alert_below_nano"] = parse_usd(value)
