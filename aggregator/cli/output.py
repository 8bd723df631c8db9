"""Where commands print: the rich consoles for stdout and stderr, the table of aggregates that
``query`` and ``demo`` print, and numbers as people read them.

Numbers for people
------------------
Text output shows a whole number as an integer (``42,512``, also when it is stored as
``38275.0``) and any other number rounded half-even to ``digits`` places after the point
(``1,500.72``; :data:`DEFAULT_DIGITS`), with thousands separators; the numbers of one column
share their number of places (:func:`column_texts`), so a column of means reads ``12.50``,
``13.00``, ``14.33``. Rounding is :meth:`decimal.Decimal.quantize`, never a float. ``--json``
output keeps the exact decimal strings.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 1_000
"""Columns of output that is not a terminal (a pipe, a file) when ``COLUMNS`` is unset: rich
would take 80 and crop or wrap table cells; a table is never wider than its content."""


def _width(stream: TextIO) -> int | None:
    """``None`` (rich's own choice: the terminal's width, or ``COLUMNS``) unless ``stream`` is
    not a terminal and ``COLUMNS`` is unset."""
    if "COLUMNS" in os.environ or stream.isatty():
        return None
    return PIPED_WIDTH


# soft_wrap: a line of text is never broken at the console's width, so messages stay one line
# each for scripts and logs; tables fit the width (a terminal's), or their content when piped
console = Console(soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, soft_wrap=True, width=_width(sys.stderr))


DEFAULT_DIGITS = 2
"""Places after the point of a number that is not whole, in text output (``--digits``)."""

MAX_DIGITS = 38
"""The most ``--digits`` takes: DynamoDB numbers hold 38 significant digits (Developer Guide,
"Supported data types")."""

_ROUNDING = Context(prec=200, rounding=ROUND_HALF_EVEN)
"""Enough precision to quantize any DynamoDB number (magnitudes up to 1E+126, 38 digits) to
:data:`MAX_DIGITS` places without an ``InvalidOperation``."""


def _whole(value: Decimal) -> bool:
    return not value.is_finite() or value == value.to_integral_value()


def _fixed(value: Decimal, places: int) -> str:
    """``value`` rounded half-even to ``places`` after the point, with thousands separators."""
    if not value.is_finite():
        return str(value)
    rounded = value.quantize(Decimal(1).scaleb(-places), context=_ROUNDING)
    if rounded.is_zero():
        rounded = abs(rounded)  # no "-0.00" for a small negative number
    return f"{rounded:,f}"


def number_text(value: Decimal | None, digits: int = DEFAULT_DIGITS, none: str = "none") -> str:
    """One number for people: a whole number as an integer (``38,275``), another rounded
    half-even to ``digits`` places (``1,500.72``); ``none`` for ``None``."""
    return column_texts([value], digits, none)[0]


def column_texts(
    values: Sequence[Decimal | None], digits: int = DEFAULT_DIGITS, none: str = ""
) -> list[str]:
    """The numbers of one column for people, with the same number of places: none when every
    number is whole (``42,512``, ``38,275``), else ``digits`` (``12.50``, ``13.00``); ``none``
    for ``None``."""
    places = 0 if all(v is None or _whole(v) for v in values) else digits
    return [none if v is None else _fixed(v, places) for v in values]


def aggregate_fields(aggregate: Any) -> Mapping[str, Decimal | None]:
    """An aggregate's kind's fields (``mean``, ``sum``, ``count``; ``min``; ...), or
    ``{"value": ...}`` for one read without them (a sum, a ``top`` entry)."""
    fields: Mapping[str, Decimal | None] = aggregate.fields
    return fields if fields else {"value": aggregate.value}


def print_aggregates(
    title: str,
    aggregates: Sequence[Any],
    digits: int = DEFAULT_DIGITS,
    *,
    buckets: bool = False,
    empty: str | None = None,
) -> None:
    """A table of aggregates: ``#``, ``key`` (with ``buckets``, each one's granularity and
    bucket start too) and a column per field of the rule's kind (``value`` for a sum; ``mean``,
    ``sum``, ``count`` for a mean; ...), numbers as :func:`column_texts` gives them; ``empty``
    (default "no aggregates (nothing counted yet)") when there are none."""
    console.print(f"[bold]{title}[/]")
    if not aggregates:
        console.print(empty or "no aggregates (nothing counted yet)", highlight=False)
        return
    names = list(aggregate_fields(aggregates[0]))
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("key")
    if buckets:
        table.add_column("granularity")
        table.add_column("bucket start")
    for name in names:
        table.add_column(name, justify="right")
    columns = [
        column_texts([aggregate_fields(a).get(name) for a in aggregates], digits, "none")
        for name in names
    ]
    for i, a in enumerate(aggregates):
        cells = [a.key] + ([a.granularity or "", a.bucket or ""] if buckets else [])
        table.add_row(str(i + 1), *(Text(c) for c in cells), *(c[i] for c in columns))
    console.print(table)


SPARK_BARS = "▁▂▃▄▅▆▇█"
"""The eight bars of a sparkline, lowest first."""


def sparkline(values: Sequence[Decimal | None]) -> str:
    """One bar per value, scaled from the smallest (``▁``) to the largest (``█``); all equal
    (or one value) draw the middle bar ``▄``, unless all are zero (nothing written: a key's
    buckets that no item reached), which draw the lowest ``▁``; ``None`` (no value: a mean's
    empty bucket) a space; an empty sequence, an empty string.

    Examples
    --------
    >>> sparkline([Decimal(0), Decimal(4), None, Decimal(8)])
    '▁▅ █'
    >>> sparkline([Decimal(3), Decimal(3)]), sparkline([Decimal(0), Decimal(0)])
    ('▄▄', '▁▁')
    """
    numbers = [v for v in values if v is not None]
    if not numbers:
        return " " * len(values)
    low, high = min(numbers), max(numbers)
    top = len(SPARK_BARS) - 1
    flat = SPARK_BARS[0] if high == 0 else SPARK_BARS[3]  # all equal: zero, or some value
    return "".join(
        " "
        if v is None
        else flat
        if low == high
        else SPARK_BARS[min(top, int((v - low) * len(SPARK_BARS) / (high - low)))]
        for v in values
    )
