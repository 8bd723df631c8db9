"""A rule's ``delta``: how much one matching item contributes, a constant or a numeric
attribute, always an exact ``Decimal``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from aggregator.core.conditions import MISSING
from aggregator.core.exceptions import EvaluationError, FailureCause
from aggregator.core.rules.messages import plain_number, rule_decimal, type_word
from aggregator.core.text import quote


def _to_decimal(value: Any) -> Decimal:
    """A delta's constant (:func:`~aggregator.core.rules.messages.rule_decimal`; a word that
    could name an attribute gets the hint to sum that attribute)."""
    return rule_decimal(value, lambda v: f"{quote(v)}{_attribute_hint(v)}")


_ATTRIBUTE_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,99}")
"""Text that reads as an attribute name, for the hint of a word given as a constant."""


def _attribute_hint(value: Any) -> str:
    """``"; to sum the attribute score, write delta: {attribute: score}"`` for a word that could
    name an attribute (else nothing): ``delta: score`` is read as a constant."""
    if not isinstance(value, str) or not _ATTRIBUTE_LIKE.fullmatch(value.strip()):
        return ""
    name = value.strip()
    return f"; to aggregate the attribute {name}, write delta: {{attribute: {name}}}"


class DeltaSpec(BaseModel):
    """How much one matching item contributes: a constant or a numeric attribute.

    YAML: ``delta: 1`` (the default), ``delta: "2.5"``, or ``delta: {attribute: dep_delay}``.
    The amount is always a ``Decimal``. A constant must be a nonzero number DynamoDB can store
    (``0``, ``"0"``, ``0.0`` and ``-0`` count nothing and are rejected).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    constant: Decimal | None = None
    attribute: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return data
        return {"constant": _to_decimal(data)}

    @field_validator("constant", mode="before")
    @classmethod
    def _constant(cls, value: Any) -> Any:
        return None if value is None else _to_decimal(value)

    @field_validator("attribute", mode="before")
    @classmethod
    def _attribute(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        hint = ""
        if isinstance(value, Decimal | int) and not isinstance(value, bool):
            # YAML reads `attribute: 5` as a number; an attribute named 5 is written quoted
            hint = f"; quote it for an attribute named {value}: {{attribute: '{value}'}}"
        raise ValueError(f"expected an attribute name (text), got {type_word(value)}{hint}")

    @model_validator(mode="after")
    def _exactly_one(self) -> DeltaSpec:
        if self.constant is None and self.attribute is None:
            raise ValueError("give a number (delta: 1) or {attribute: NAME}")
        if self.constant is not None and self.attribute is not None:
            raise ValueError("give either a number (delta: 1) or {attribute: NAME}, not both")
        if self.attribute is not None and not self.attribute:
            raise ValueError("attribute name must not be empty")
        if self.constant is not None and self.constant == 0:
            raise ValueError(
                f"a delta of {plain_number(self.constant)} counts nothing; give a nonzero "
                "number such as 1, or {attribute: NAME}"
            )
        return self

    def attributes(self) -> frozenset[str]:
        return frozenset() if self.attribute is None else frozenset((self.attribute,))

    def evaluate(self, image: Mapping[str, Any]) -> Decimal:
        """The amount for one image.

        Raises
        ------
        EvaluationError
            When the delta attribute is missing or not a number.
        """
        if self.constant is not None:
            return self.constant
        assert self.attribute is not None  # _exactly_one: no constant, so an attribute
        value = image.get(self.attribute, MISSING)
        if value is MISSING:
            raise EvaluationError(
                f"delta attribute {quote(self.attribute)} is missing",
                FailureCause.MISSING_ATTRIBUTE,
            )
        if not isinstance(value, Decimal) or isinstance(value, bool):
            kind = "null" if value is None else type(value).__name__
            raise EvaluationError(
                f"delta attribute {quote(self.attribute)} is {kind}, not a number",
                FailureCause.WRONG_TYPE,
            )
        return value
