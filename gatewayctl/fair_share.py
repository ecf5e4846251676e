"""``--max-concurrent N`` / ``--no-max-concurrent`` on ``key create``, ``key update`` and
``account update``: how many requests a key or an account may have in flight at once
(the admin API's ``max_concurrent``; null: the server's ``[server]`` default, 0: no cap)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

MAX_CONCURRENT = 1_000_000  # as gatewayd.directory.MAX_CONCURRENT


def parse_max_concurrent(value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a whole number") from None
    if not 0 <= number <= MAX_CONCURRENT:
        raise typer.BadParameter(f"{value!r}: give 0 (no cap) up to {MAX_CONCURRENT}")
    return number


MaxConcurrentOpt = Annotated[
    Optional[int],
    typer.Option("--max-concurrent", metavar="N", parser=parse_max_concurrent,
                 help="At most N requests in flight at once (per gatewayd instance); 0 = no cap."),
]
NoMaxConcurrentOpt = Annotated[
    bool,
    typer.Option("--no-max-concurrent", help="Back to the server's default cap on requests in flight."),
]


def max_concurrent_field(body: dict[str, Any], value: int | None, server_default: bool = False) -> None:
    """Put ``max_concurrent`` in an API body when either option was given (null: the default)."""
    if value is not None or server_default:
        body["max_concurrent"] = value
