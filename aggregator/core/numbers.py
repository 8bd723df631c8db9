"""Decimal arithmetic with DynamoDB's number precision (pure).

DynamoDB numbers have up to 38 significant digits (Developer Guide, "Supported data types").
Python's default decimal context keeps only 28, so sums of large amounts would round silently;
every sum the engine makes goes through :data:`CONTEXT`, which keeps 38 digits and raises
``decimal.Inexact`` rather than round.
"""

from __future__ import annotations

from decimal import Context, Decimal, Inexact, Overflow, Underflow

__all__ = ["CONTEXT", "add", "subtract"]

# Inexact (not Rounded): aligning 1E+40 with 0 gives a 41-digit coefficient whose extra digits
# are zeros; that rounding loses nothing, and DynamoDB stores 1E+40, so only a loss of non-zero
# digits is an error.
CONTEXT = Context(prec=38, Emin=-128, Emax=126, traps=[Overflow, Inexact, Underflow])


def add(a: Decimal, b: Decimal) -> Decimal:
    """``a + b`` exactly, within 38 significant digits.

    Raises
    ------
    decimal.Inexact
        When the exact result needs more than 38 digits (DynamoDB would reject it too).
    """
    return CONTEXT.add(a, b)


def subtract(a: Decimal, b: Decimal) -> Decimal:
    """``a - b`` exactly, within 38 significant digits (raises like :func:`add`)."""
    return CONTEXT.subtract(a, b)
