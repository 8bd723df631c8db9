"""Thresholds: a rule's aggregates announce, as EventBridge events, each time their value crosses
a line.

::

    rules:
      - name: likes_per_post
        match: {SK: {prefix: "LIKE#"}}
        key: "{PK}"
        thresholds:
          - name: popular
            above: 1000          # at or above 1,000: entered when it gets there, left below
          - name: quiet
            below: 5             # under 5
            keys: ["POST#a91f"]  # only these keys (as ``query list`` shows them)

``keys`` are key texts; a number or a boolean there stands for its text as a key template renders
it (``keys: [1, 2.50, true]`` is ``["1", "2.5", "true"]``:
:func:`~aggregator.core.rules.keys.format_key_value`).

A threshold is a condition on one aggregate's value: ``above: X`` holds while the value is ``X``
or more, ``below: X`` while it is less than ``X``. The framework sends one event each time the
condition starts to hold (*entered*) and each time it stops (*left*), read from the aggregate
item's own stream record, its old and new image (:mod:`aggregator.core.crossings`). Each key
crosses on its own; with a window, each time bucket, of every granularity the rule keeps unless
``granularity`` names one.

The line ``X`` is a number DynamoDB can hold (at most 38 significant digits, magnitude from
1E-130 to 9.9999999999999999999999999999999999999E+125: DynamoDB Developer Guide, "Supported
data types and naming rules", *Number*), and compared exactly; it is shown (in the default name
and in :attr:`Threshold.condition`) exactly too, in plain decimal notation, as a key shows a
number (:func:`plain_decimal`: ``1000``, ``2.5``).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aggregator.core.exceptions import EvaluationError
from aggregator.core.rules.keys import format_key_value
from aggregator.core.rules.messages import rule_decimal, type_word
from aggregator.core.text import quote
from aggregator.core.windows import Granularity

__all__ = [
    "MAX_THRESHOLD_NAME_CHARS",
    "THRESHOLD_NAME_PATTERN",
    "Threshold",
    "line_number",
    "plain_decimal",
]

MAX_THRESHOLD_NAME_CHARS = 64
"""Longest threshold name, in characters (the framework's own limit: a threshold's name is in
every event's detail and in ``validate``'s table). The one source of
:data:`THRESHOLD_NAME_PATTERN` and of the messages that refuse a name."""

THRESHOLD_NAME_PATTERN = rf"^[A-Za-z][A-Za-z0-9_.-]{{0,{MAX_THRESHOLD_NAME_CHARS - 1}}}$"
"""A threshold's name: letters, digits, ``_ . -``, starting with a letter, at most
:data:`MAX_THRESHOLD_NAME_CHARS` characters."""


def line_number(value: Any) -> Decimal:
    """A threshold's line (``above:`` or ``below:``) as an exact ``Decimal``.

    Takes a YAML number (a ``Decimal``), a Python ``int`` or ``float`` (its shortest text, as a
    delta takes it) or numeric text (``"1000"``).

    Raises
    ------
    ValueError
        One line, in the words of a rule file: for a boolean, text that is not a number,
        anything else but a number, a number that is not finite, and a number DynamoDB cannot
        hold (more than 38 significant digits, a magnitude over
        9.9999999999999999999999999999999999999E+125 or under 1E-130: DynamoDB Developer Guide,
        "Supported data types and naming rules", *Number*).

    Examples
    --------
    >>> line_number("2.50"), line_number(1000)
    (Decimal('2.50'), Decimal('1000'))
    >>> line_number(True)
    Traceback (most recent call last):
    ValueError: expected a number, got a boolean
    """
    return rule_decimal(value)


def plain_decimal(number: Decimal) -> str:
    """``number`` exactly, in plain decimal notation without exponent or trailing zeros: no
    decimal context is involved, so nothing rounds (Python's default context keeps 28 digits,
    DynamoDB numbers have up to 38).

    >>> plain_decimal(Decimal("1E+3")), plain_decimal(Decimal("2.50")), plain_decimal(Decimal("-0"))
    ('1000', '2.5', '0')
    >>> plain_decimal(Decimal("1234567890123456789012345678.5"))
    '1234567890123456789012345678.5'
    """
    text = format(number, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("0", "-0") else text


def _granularity_label(value: Any) -> Any:
    """``granularity``: a granularity's label (``hour``; ``3600`` and ``"3600s"`` are ``hour``),
    or text left as written for the rule to refuse with the ones it keeps."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | Decimal):
        raise ValueError(f"expected a granularity such as hour, got {type_word(value)}")
    try:
        return Granularity.parse(value).label
    except ValueError:
        if isinstance(value, str):
            return value  # not a granularity at all: the rule names the ones it keeps
        number = Decimal(value)
        if number.is_finite() and number > 0 and number == number.to_integral_value():
            raise  # a whole number of seconds, too long: parse's own message says so
        raise ValueError(
            "granularity must be minute, hour, day or a positive whole number of seconds, got "
            f"{type_word(value)}"
        ) from None


class Threshold(BaseModel):
    """One threshold of a rule (module docstring).

    Attributes
    ----------
    name
        Unique within the rule; in every event and in its id; letters, digits, ``_ . -``,
        starting with a letter, at most :data:`MAX_THRESHOLD_NAME_CHARS` characters. Default:
        ``above-<X>`` or ``below-<X>`` (``X`` exactly, as :attr:`condition` shows it), plus
        ``-per-<granularity>`` with a ``granularity``; a default longer than the limit is
        refused (a :class:`ValueError` asking for a name).
    above, below
        The line, exactly one of them: the condition holds while the value is ``>= above``, or
        ``< below``. A number DynamoDB can hold (:func:`line_number`, which raises the
        :class:`ValueError` for anything else).
    granularity
        Only the time buckets of this granularity of the rule's window cross the threshold
        (``hour``; a number of seconds is taken as its label: ``3600`` is ``hour``); ``None``
        (default): every granularity the rule keeps, and a rule without a window. The rule
        refuses a granularity its window does not keep.
    keys
        Only these keys of the rule (their display text, as ``query list`` shows them); default
        every key. A number or a boolean is taken as its text as a key renders it (``1``:
        ``"1"``, ``2.50``: ``"2.5"``, ``true``: ``"true"``); anything else but text, and an
        empty list, is refused (one :class:`ValueError` for the field).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="", pattern=rf"{THRESHOLD_NAME_PATTERN}|^$")
    above: Decimal | None = None
    below: Decimal | None = None
    keys: tuple[str, ...] | None = Field(default=None, min_length=1)
    granularity: str | None = None

    @field_validator("above", "below", mode="before")
    @classmethod
    def _line_number(cls, value: Any) -> Any:
        return None if value is None else line_number(value)

    @field_validator("granularity", mode="before")
    @classmethod
    def _granularity(cls, value: Any) -> Any:
        return _granularity_label(value)

    @field_validator("keys", mode="before")
    @classmethod
    def _key_texts(cls, value: Any) -> Any:
        """Numbers and booleans as their key text; one error for the field, not one per item."""
        if not isinstance(value, list | tuple):
            return value  # None, or pydantic's "expected a list"
        if not value:
            raise ValueError("give at least one key, or leave keys out to watch every key")
        texts = []
        for number, item in enumerate(value, 1):
            if isinstance(item, int | float) and not isinstance(item, bool):
                item = Decimal(str(item))  # from Python; YAML gives Decimal
            if not isinstance(item, str | bool | Decimal):
                raise ValueError(
                    f"key {number} is {type_word(item)}: give each key as text, as "
                    "`aggregator query list` shows it"
                )
            try:
                texts.append(format_key_value(item))
            except EvaluationError as exc:
                raise ValueError(str(exc)) from None  # "key number 1E+400: too large..."
        return tuple(texts)

    @model_validator(mode="after")
    def _one_line(self) -> Threshold:
        if (self.above is None) == (self.below is None):
            raise ValueError("give exactly one of above: or below:")
        if not self.name:
            name = f"{self.direction}-{self.line_text}"
            if self.granularity is not None:
                name += f"-per-{self.granularity}"
            if not re.fullmatch(THRESHOLD_NAME_PATTERN, name):
                raise ValueError(
                    f"its default name {quote(name)} is longer than "
                    f"{MAX_THRESHOLD_NAME_CHARS} characters: give the threshold a name"
                )
            object.__setattr__(self, "name", name)
        return self

    @property
    def direction(self) -> Literal["above", "below"]:
        return "above" if self.above is not None else "below"

    @property
    def line(self) -> Decimal:
        line = self.above if self.above is not None else self.below
        assert line is not None
        return line

    @property
    def line_text(self) -> str:
        """The line exactly, in plain decimal notation without trailing zeros (``"1000"``,
        ``"2.5"``, ``"1234567890123456789012345678.5"``), as a key shows a number."""
        return plain_decimal(self.line)

    @property
    def condition(self) -> str:
        """``"above 1000"`` (at or above) or ``"below 5"``, as events and docs show it: the line
        exactly (:attr:`line_text`)."""
        return f"{self.direction} {self.line_text}"

    def holds(self, value: Decimal) -> bool:
        """Whether the condition holds for ``value``."""
        return value >= self.line if self.above is not None else value < self.line

    def applies_to(self, key: str, granularity: str | None = None) -> bool:
        """Whether the threshold watches the key ``key`` (display text), in a time bucket of
        ``granularity`` (its label; ``None`` for a rule without a window)."""
        if self.granularity is not None and granularity != self.granularity:
            return False
        return self.keys is None or key in self.keys
