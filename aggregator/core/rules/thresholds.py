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
item's own stream record, its old and new image (:mod:`aggregator.core.crossings`). A missing
aggregate counts as 0. Each key crosses on its own; with a window, each time bucket.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aggregator.core.exceptions import EvaluationError
from aggregator.core.rules.keys import format_key_value
from aggregator.core.rules.messages import type_word

__all__ = ["THRESHOLD_NAME_PATTERN", "Threshold"]

THRESHOLD_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
"""A threshold's name: letters, digits, ``_ . -``, starting with a letter, at most 64."""


class Threshold(BaseModel):
    """One threshold of a rule (module docstring).

    Attributes
    ----------
    name
        Unique within the rule; in every event and in its id. Default: ``above-<X>`` or
        ``below-<X>``.
    above, below
        The line, exactly one of them: the condition holds while the value is ``>= above``, or
        ``< below``.
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
        line = self.line
        if not line.is_finite():
            raise ValueError(f"the line must be a finite number, not {line}")
        if not self.name:
            object.__setattr__(self, "name", f"{self.direction}-{line.normalize():f}")
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
    def condition(self) -> str:
        """``"above 1000"`` (at or above) or ``"below 5"``, as events and docs show it."""
        return f"{self.direction} {self.line.normalize():f}"

    def holds(self, value: Decimal) -> bool:
        """Whether the condition holds for ``value``."""
        return value >= self.line if self.above is not None else value < self.line

    def applies_to(self, key: str) -> bool:
        """Whether the threshold watches the key ``key`` (display text)."""
        return self.keys is None or key in self.keys
