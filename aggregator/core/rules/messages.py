"""Small helpers that put rule names, numbers and text into one-line messages, shared by the
modules of :mod:`aggregator.core.rules`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from aggregator.core.text import MAX_QUOTED_CHARS, MAX_REASON_CHARS, quote


def plain_number(value: Any) -> str:
    """A number for a message: as it is (``1E+20``) when short, else a bounded quote."""
    text = str(value)
    return text if len(text) <= MAX_QUOTED_CHARS else quote(text)


def type_word(value: Any) -> str:
    """What a YAML value is, in the words of YAML: a mapping, a list, text, a number...

    >>> type_word([1]), type_word("hour"), type_word(Decimal(5)), type_word(None)
    ('a list', "text 'hour'", 'the number 5', 'nothing')
    """
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return f"text {quote(value)}"
    if isinstance(value, Decimal | int | float):
        return f"the number {plain_number(value)}"
    return "nothing" if value is None else type(value).__name__


def rule_name(name: Any) -> str:
    """A rule name for a message: valid names (at most 100 characters) are quoted whole."""
    return quote(name, limit=100)


def rule_names(names: Iterable[str], most: int = 20) -> str:
    """Comma-separated rule names, at most ``most`` of them (then how many there are)."""
    listed = list(names)
    shown = ", ".join(listed[:most]) or "none"
    return shown if len(listed) <= most else f"{shown}, … ({len(listed)} rules)"


_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every character :meth:`str.splitlines` splits at."""


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` on one line (each line break escaped, ``\\n``), cut at ``limit`` characters."""
    text = _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def unencodable(text: str) -> str | None:
    """Why UTF-8 (so DynamoDB) cannot hold ``text``: a lone surrogate, or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds {quote(text[exc.start])} at character {exc.start + 1}, a lone surrogate "
            "that UTF-8 cannot encode"
        )
    return None


def rule_decimal(value: Any, got: Callable[[Any], str] | None = None) -> Decimal:
    """A number of a rule file (a delta's constant, a threshold's line) as an exact ``Decimal``
    DynamoDB can hold: a YAML number, a Python ``int`` or ``float`` (its shortest text) or
    numeric text (``"1000"``).

    Raises
    ------
    ValueError
        One line: ``expected a number, got <got(value)>`` (default :func:`type_word`) for a
        boolean (``a boolean``), text that is not a number or anything else; ``expected a
        finite number``; or a number DynamoDB cannot hold (more than 38 significant digits, a
        magnitude over 9.9999999999999999999999999999999999999E+125 or under 1E-130: DynamoDB
        Developer Guide, "Supported data types and naming rules", *Number*).
    """
    from aggregator.core.conditions import dynamodb_number_problem

    describe = type_word if got is None else got
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if not isinstance(value, int | float | str | Decimal):
        raise ValueError(f"expected a number, got {type_word(value)}")
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"expected a number, got {describe(value)}") from None
    if not number.is_finite():
        raise ValueError(f"expected a finite number, got {plain_number(number)}")
    problem = dynamodb_number_problem(number)
    if problem:
        raise ValueError(problem)
    return number
