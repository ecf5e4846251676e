"""``gatewayctl key create|update`` options for a key's periodic budget (gatewayd/budgets.py)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

BudgetOpt = Annotated[
    Optional[str],
    typer.Option("--budget", metavar="USD",
                 help="Spend at most this much per --budget-period ('none' removes the budget)."),
]
BudgetPeriodOpt = Annotated[
    Optional[str],
    typer.Option("--budget-period", metavar="day|week|month",
                 help="The budget's period, from midnight in the account's zone (weeks: Monday; months: the 1st)."),
]
NoBudgetOpt = Annotated[bool, typer.Option("--no-budget", help="Remove the periodic budget.")]


def budget_fields(body: dict[str, Any], budget: str | None, period: str | None, no_budget: bool = False) -> None:
    """Put the budget options in an API body: ``--budget none`` / ``--no-budget`` send null (clear)."""
    from gatewayctl.common import exclusive, parse_usd

    if period is not None and period not in ("day", "week", "month"):
        raise typer.BadParameter(f"must be day, week or month (got {period!r})", param_hint="'--budget-period'")
    exclusive({"--budget": budget is not None, "--no-budget": no_budget})
    cleared = no_budget or (budget is not None and budget.strip().lower() == "none")
    if cleared:
        if period is not None:
            raise typer.BadParameter("a budget period needs a budget", param_hint="'--budget-period'")
        body["budget_nano"] = None
        return
    if budget is not None:
        body["budget_nano"] = parse_usd(budget)
    if period is not None:
        body["budget_period"] = period
