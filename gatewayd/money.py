"""Money as integer nano-dollars (1e-9 USD). No floats anywhere in billing.

A catalogue price is USD per 1,000,000 tokens; with up to three decimals it is an
exact whole number of nano-dollars per token ($0.24/M -> 240 nano a token).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation, localcontext
from fractions import Fraction

NANO_PER_USD = 1_000_000_000
MAX_USD = 10**12  # far above any real balance; keeps nonsense like 1e400000 out
# What an account may be paid in total, and the largest spend limit: $1,000,000,000. The stores
# keep money in 64-bit integers (9.2e18 nano): with every account's payments under 1e18, its
# credit, its charges and its holds, and the audit's sums of them, stay inside with room.
MAX_PAID_NANO = 10**18
MAX_RATIO = 1000  # a group's price multiplier: charges stay far inside 64-bit integers
MAX_PRICE_PER_MILLION = 10**6  # USD per 1M tokens: 1 USD a token, far above any real price


class MoneyError(ValueError):
    """A dollar amount or price that cannot be represented exactly."""


def usd_to_nano(value: str | int | Decimal) -> int:
    """'10.50' -> 10_500_000_000. Refuses more than nine decimals, NaN and infinities."""
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise MoneyError(f"not a dollar amount: {value!r}") from None
    if not amount.is_finite() or abs(amount) > MAX_USD:
        raise MoneyError(f"not a dollar amount: {value!r}")
    nano = amount * NANO_PER_USD
    if nano != nano.to_integral_value():
        raise MoneyError(f"more than nine decimals: {value!r}")
    return int(nano)


def price_per_million_to_nano_per_token(value: str | int | float | Decimal) -> int:
    """USD per 1M tokens -> nano-USD per token. Exact for up to three decimals.

    TOML gives floats; ``Decimal(str(f))`` recovers the decimal the operator wrote.
    """
    try:
        price = Decimal(str(value))
    except InvalidOperation:
        raise MoneyError(f"not a price: {value!r}") from None
    if not price.is_finite() or price < 0:
        raise MoneyError(f"not a price: {value!r}")
    if price > MAX_PRICE_PER_MILLION:
        raise MoneyError(f"price {value!r} is above {MAX_PRICE_PER_MILLION} USD per 1M tokens")
    per_token = price * 1000  # (USD / 1e6 tokens) * 1e9 nano/USD
    if per_token != per_token.to_integral_value():
        raise MoneyError(f"price {value!r} has more than three decimals")
    return int(per_token)


def ratio(value: str | int | float | Decimal) -> Fraction:
    """A price ratio (group multiplier) as an exact fraction of what the operator wrote."""
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise MoneyError(f"not a ratio: {value!r}") from None
    if not amount.is_finite():  # Fraction() raises OverflowError on infinity, ValueError on NaN
        raise MoneyError(f"not a ratio: {value!r}")
    if amount < 0:
        raise MoneyError(f"ratio must not be negative: {value!r}")
    if amount > MAX_RATIO:
        raise MoneyError(f"ratio must be at most {MAX_RATIO}: {value!r}")
    return Fraction(amount)


def apply_ratio(nano: int, r: Fraction) -> int:
    """Multiply by a ratio and round half up to a whole nano-dollar (integer arithmetic only)."""
    if r == 1:
        return nano
    scaled = nano * r
    # floor(x + 1/2) for x >= 0; charges are never negative.
    return (2 * scaled.numerator + scaled.denominator) // (2 * scaled.denominator)


def format_usd(nano: int | None, places: int = 6) -> str:
    """For people: 10_500_000_000 -> '$10.500000'. None -> '-'."""
    if nano is None:
        return "-"
    sign = "-" if nano < 0 else ""
    with localcontext() as exact:  # the default 28 digits fail (InvalidOperation) on amounts past 1e19
        exact.prec = len(str(abs(nano))) + places + 2
        amount = (Decimal(abs(nano)) / NANO_PER_USD).quantize(Decimal(1).scaleb(-places))
    return f"{sign}${amount}"


def usd_brief(nano: int | None) -> str:
    """For people, as the console shows money: the cents always, more places only where the
    amount has them ('$3.00', '$0.0015')."""
    text = format_usd(nano)
    if nano is None or "." not in text:
        return text
    whole, frac = text.split(".")
    return f"{whole}.{frac.rstrip('0').ljust(2, '0')}"


def nano_to_usd_str(nano: int | None) -> str | None:
    """Exact decimal string for JSON beside the ``*_nano`` integers: 1_500_000_000 -> '1.5'."""
    if nano is None:
        return None
    value = Decimal(nano) / NANO_PER_USD
    text = format(value.normalize(), "f")
    return text
