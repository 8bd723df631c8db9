"""Numbers as sort-key text that sorts as the numbers do (pure).

DynamoDB orders a string sort key by its UTF-8 bytes (Developer Guide, "Query operations in
DynamoDB": "If the data type of the sort key is String, the results are returned in order of
UTF-8 bytes"), so a number kept in a sort key, e.g. one item per distinct value of a min/max
rule, needs a text whose byte order is the numeric order: ``"-10" < "-9"`` and ``"10" < "9"`` as
plain text. :func:`sortable_number` gives one for every number DynamoDB stores (up to 38
significant digits, magnitudes from 1E-130 to under 1E+126: Developer Guide, "Supported data
types"), and :func:`number_from_sortable` reads it back.

The encoding, for ``v = ±0.d1 d2 ... dn * 10^e`` with ``d1 != 0`` and no trailing zeros:

``"1"``                                     zero
``"2" + f"{e + 500:03d}" + digits``          positive: the exponent first (fixed width), then
                                            the digits (a shorter prefix is the smaller value)
``"0" + f"{499 - e:03d}" + nines + "~"``     negative: exponent and digits complemented
                                            (``9 - d``), ending in ``"~"``, which sorts above
                                            every digit, so ``-0.12`` (``"87~"``) sorts below
                                            ``-0.1`` (``"8~"``)

Equal numbers get equal text (``1.50`` and ``1.5``; ``-0`` and ``0``), and the text is at most
43 ASCII bytes.
"""

from __future__ import annotations

from decimal import Context, Decimal

from aggregator.core.conditions import dynamodb_number_problem

__all__ = ["MAX_SORTABLE_BYTES", "number_from_sortable", "sortable_number"]

MAX_SORTABLE_BYTES = 43
"""The longest text :func:`sortable_number` returns, in bytes (ASCII): sign, three exponent digits,
38 digits and the end mark of a negative number."""

_BIAS = 500
_NEGATIVE, _ZERO, _POSITIVE = "0", "1", "2"
_END = "~"
_COMPLEMENT = str.maketrans("0123456789", "9876543210")
_EXACT = Context(prec=38, Emin=-999, Emax=999)


def sortable_number(value: Decimal) -> str:
    """The order-preserving text of ``value`` (module docstring).

    Raises
    ------
    ValueError
        When ``value`` is not a number DynamoDB can store (not finite, more than 38 significant
        digits, out of range).

    Examples
    --------
    >>> [sortable_number(Decimal(t)) for t in ("-10", "-9", "0", "9", "10")]
    ['04978~', '04980~', '1', '25019', '25021']
    """
    if not value.is_finite():
        raise ValueError(f"{value} is not a finite number")
    problem = dynamodb_number_problem(value)
    if problem is not None:
        raise ValueError(problem)
    if value == 0:
        return _ZERO
    sign, digits, exponent = value.as_tuple()
    text = "".join(map(str, digits)).lstrip("0")
    stripped = text.rstrip("0")
    assert isinstance(exponent, int)  # finite
    # value = 0.<text> x 10^e with e = exponent + len(text)
    e = exponent + len(text)
    if not sign:
        return f"{_POSITIVE}{e + _BIAS:03d}{stripped}"
    return f"{_NEGATIVE}{_BIAS - 1 - e:03d}{stripped.translate(_COMPLEMENT)}{_END}"


def number_from_sortable(text: str) -> Decimal:
    """The number :func:`sortable_number` encoded as ``text``, normalized (``Decimal("1.5")``
    for the text of ``1.50``).

    Raises
    ------
    ValueError
        When ``text`` is not such an encoding.
    """
    if text == _ZERO:
        return Decimal(0)
    negative = text.startswith(_NEGATIVE) and text.endswith(_END)
    if not (negative or text.startswith(_POSITIVE)) or len(text) < 5:
        raise ValueError(f"not a sortable number: {text!r}")
    head, digits = text[1:4], text[4:-1] if negative else text[4:]
    if not (head.isdigit() and digits.isdigit()) or digits.startswith("9" if negative else "0"):
        raise ValueError(f"not a sortable number: {text!r}")
    if negative:
        e = _BIAS - 1 - int(head)
        digits = digits.translate(_COMPLEMENT)
    else:
        e = int(head) - _BIAS
    # built from text: exact whatever the digits (scaleb would round to the context's precision)
    number = Decimal(f"{'-' if negative else ''}{digits}E{e - len(digits)}")
    return number.normalize(_EXACT)
